/**
 * MCP calls under chaos (docs/protocol.md § MCP tools hosted by peers): two hosts, each serving an `echo`
 * tool as a server of its own, and three callers, every session starting on a different entry point (the
 * load balancer or a node) and failing over to the others. Callers call at a given rate, one call in
 * flight each, alternating servers; the tool answers `{echo: args.n, host}`. Recorded in the history
 * (cli/history/format.ts): `mcp-call` invoke and its outcome as the caller's request settled, and one
 * `mcp-result` per `mcp.call_result` frame the caller's session got, so a result that came twice, for a
 * call never made, or with another call's value is visible to cli/checkers/mcp.ts.
 */
import { randomUUID } from 'node:crypto';
import type { MeshClient as Client } from '@mesh-broker/sdk';
import { MeshClient, MeshRequestError } from '@mesh-broker/sdk';
import type { Frame } from '../../protocol/frames.js';
import type { Recorder } from '../history/writer.js';
import { INDETERMINATE } from '../load/generator.js';
import { createLoadMeshes, type LoadPeerPlan } from '../load/setup.js';
import { type ChaosCluster, loadEntries } from './workloads.js';

const HOSTS = 2;
const CALLERS = 3;
export const MCP_TOOL = 'echo';
/** Past the broker's own MCP_CALL_TIMEOUT_MS (30 s): a call the broker times out says so first. */
const CALL_TIMEOUT_MS = 35_000;

const serverName = (h: number) => `chaos-echo-${h + 1}`;

export class McpWorkload {
  accepted = 0;
  failed = 0;
  private readonly clients: Client[] = [];
  private readonly busy = new Set<number>();
  private readonly inFlight = new Set<Promise<void>>();
  private next = 0;

  private constructor(
    readonly meshId: string,
    private readonly callers: Array<{ client: Client; name: string; pubkey: string }>,
    private readonly history: Recorder,
  ) {}

  static async start(cluster: ChaosCluster, history?: Recorder): Promise<McpWorkload> {
    const plans = await createLoadMeshes(
      { url: cluster.adminUrl, token: cluster.adminToken },
      { peers: HOSTS + CALLERS, meshes: 1 },
    );
    const entries = loadEntries(cluster);
    const urlsFrom = (i: number) => entries.map((_, j) => entries[(i + j) % entries.length]!);
    const open = (plan: LoadPeerPlan, name: string) =>
      new MeshClient({
        urls: urlsFrom(plan.index),
        meshId: plan.meshId,
        keys: plan.keys,
        name,
        requestTimeoutMs: CALL_TIMEOUT_MS,
        backoff: { initialMs: 100, maxMs: 1000 },
      });
    const callers = plans.slice(HOSTS).map((plan, c) => {
      const name = `mcp-caller-${c + 1}`;
      return { client: open(plan, name), name, pubkey: plan.keys.pubkey };
    });
    const workload = new McpWorkload(plans[0]!.meshId, callers, history);
    for (let h = 0; h < HOSTS; h++) {
      const name = `mcp-host-${h + 1}`;
      const host = open(plans[h]!, name);
      workload.clients.push(host);
      await host.connect();
      await host.mcp.host(serverName(h), [{ name: MCP_TOOL }], (args) => ({
        echo: (args as { n?: unknown } | null)?.n ?? null,
        host: name,
      }));
    }
    for (const caller of callers) {
      workload.clients.push(caller.client);
      caller.client.on('frame', (f: Frame) => {
        if (f.type !== 'mcp.call_result') return;
        history?.record({
          type: 'ok',
          f: 'mcp-result',
          process: caller.name,
          value: {
            mesh: workload.meshId,
            caller: caller.pubkey,
            callId: String(f.callId),
            ...(f.error === undefined ? { result: f.result ?? null } : { error: String(f.error) }),
          },
        });
      });
      await caller.client.connect();
    }
    return workload;
  }

  /** Calls at `perSecond` (over all callers) until `untilMs` after now, then waits for the calls out. */
  async run(perSecond: number, untilMs: number, signal: AbortSignal): Promise<void> {
    const started = Date.now();
    let issued = 0;
    await new Promise<void>((resolve) => {
      const timer = setInterval(() => {
        const elapsed = Date.now() - started;
        if (elapsed >= untilMs || signal.aborted) {
          clearInterval(timer);
          resolve();
          return;
        }
        while (issued < Math.floor((perSecond * elapsed) / 1000)) {
          const c = this.freeCaller();
          if (c === undefined) return; // every caller has a call out: the offered rate is not met
          this.call(c, issued++);
        }
      }, 20);
    });
    await Promise.all([...this.inFlight]);
  }

  private freeCaller(): number | undefined {
    for (let i = 0; i < this.callers.length; i++) {
      const c = (this.next + i) % this.callers.length;
      if (!this.busy.has(c) && this.callers[c]!.client.connected) {
        this.next = (c + 1) % this.callers.length;
        return c;
      }
    }
    return undefined;
  }

  private call(c: number, n: number): void {
    const caller = this.callers[c]!;
    const callId = randomUUID();
    const server = serverName(n % HOSTS);
    const value = { mesh: this.meshId, caller: caller.pubkey, callId, server, tool: MCP_TOOL, args: { n } };
    this.history?.record({ type: 'invoke', f: 'mcp-call', process: caller.name, value });
    this.busy.add(c);
    const done = caller.client
      .request<Frame>({ type: 'mcp.call', callId, server, tool: MCP_TOOL, args: { n } })
      .then(
        (reply) => {
          if (typeof reply.error === 'string') {
            this.failed++;
            // `timeout`, `host_left:`, `unavailable:` may have reached the host (it may have run the tool):
            // indeterminate; only the tool's own error is a definite failure.
            const code = /^(timeout|host_left|unavailable)/.exec(reply.error)?.[1] ?? 'tool_error';
            const type = code === 'tool_error' ? 'fail' : 'info';
            this.history?.record({
              type,
              f: 'mcp-call',
              process: caller.name,
              value: { ...value, error: code },
            });
          } else {
            this.accepted++;
            this.history?.record({
              type: 'ok',
              f: 'mcp-call',
              process: caller.name,
              value: { ...value, result: reply.result ?? null },
            });
          }
        },
        (error) => {
          this.failed++;
          const code = error instanceof MeshRequestError ? error.code : 'error';
          const type = INDETERMINATE.has(code) ? 'info' : 'fail';
          this.history?.record({
            type,
            f: 'mcp-call',
            process: caller.name,
            value: { ...value, error: code },
          });
        },
      );
    const settled = done.finally(() => {
      this.busy.delete(c);
      this.inFlight.delete(settled);
    });
    this.inFlight.add(settled);
  }

  close(): void {
    for (const c of this.clients) c.close();
  }
}

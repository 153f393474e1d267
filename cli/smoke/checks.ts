/**
 * The smoke checks: each named, each driving real peers through the SDK against chosen nodes, each one
 * state-inventory row (or a cluster property). A check throws `CheckFailed` with what it saw; it is `n/a`
 * when the cluster has too few nodes for it.
 */
import { verifyMesh } from '../../broker/audit/verify.js';
import { createPool } from '../../broker/db/pool.js';
import type { Frame } from '../../client/frames.js';
import { eventually, type SmokeContext } from './context.js';

export class CheckFailed extends Error {}

/** How long a check waits for something to arrive before it calls it missing (generous: machines are busy). */
const DELIVERY_WAIT_MS = 5000;
export class NotApplicable extends Error {}

export interface Check {
  name: string;
  /** The row of the state inventory (or the property) it checks. */
  row: string;
  run(context: SmokeContext): Promise<void>;
}

function twoNodes(context: SmokeContext) {
  const [a, b] = context.target.nodes;
  if (!a || !b) throw new NotApplicable('needs two nodes');
  return [a, b] as const;
}

export const CHECKS: Check[] = [
  {
    name: 'cross-node-dm',
    row: 'direct / broadcast / group delivery',
    async run(context) {
      const [a, b] = twoNodes(context);
      const mesh = await context.mesh(2);
      const recipient = await context.peer(a.url, mesh, mesh.members[0]!);
      const sender = await context.peer(b.url, mesh, mesh.members[1]!);
      let got = false;
      recipient.on('message', () => {
        got = true;
      });
      await sender.send(mesh.members[0]!.pubkey, 'smoke');
      if (!(await eventually(() => got, DELIVERY_WAIT_MS)))
        throw new CheckFailed(`a DM sent on ${b.id} did not reach ${a.id} in ${DELIVERY_WAIT_MS / 1000} s`);
    },
  },
  {
    name: 'cross-node-stream',
    row: 'streamSubscriptions',
    async run(context) {
      const [a, b] = twoNodes(context);
      const mesh = await context.mesh(2);
      const subscriber = await context.peer(a.url, mesh, mesh.members[0]!);
      const publisher = await context.peer(b.url, mesh, mesh.members[1]!);
      await subscriber.request({ type: 'stream.subscribe', stream: 'smoke' });
      let got = false;
      subscriber.on('frame', (f) => {
        if (f.type === 'stream.data') got = true;
      });
      await publisher.request({ type: 'stream.publish', stream: 'smoke', data: 1 });
      if (!(await eventually(() => got, DELIVERY_WAIT_MS)))
        throw new CheckFailed(`a publish on ${b.id} did not reach a subscriber on ${a.id}`);
    },
  },
  {
    name: 'presence-cluster-wide',
    row: 'presence / sessions',
    async run(context) {
      const [a, b] = twoNodes(context);
      const mesh = await context.mesh(2);
      const onA = await context.peer(a.url, mesh, mesh.members[0]!);
      const onB = await context.peer(b.url, mesh, mesh.members[1]!);
      const ok = await eventually(
        async () => (await onA.peers()).some((p) => p.sessionId === onB.sessionId),
        2000,
      );
      if (!ok) throw new CheckFailed(`peers.list on ${a.id} does not show a session on ${b.id}`);
    },
  },
  {
    name: 'audit-chain-intact',
    row: 'audit lastHash',
    async run(context) {
      const [a, b] = twoNodes(context);
      const mesh = await context.mesh(2);
      const onA = await context.peer(a.url, mesh, mesh.members[0]!);
      const onB = await context.peer(b.url, mesh, mesh.members[1]!);
      // Appends from both nodes, interleaved: each node has had the chain's head before the other moves it.
      for (let i = 0; i < 3; i++) {
        await onA.send(mesh.members[1]!.pubkey, `a${i}`);
        await onA.request({ type: 'audit.query', limit: 1 });
        await onB.send(mesh.members[0]!.pubkey, `b${i}`);
        await onB.request({ type: 'audit.query', limit: 1 });
      }
      const pool = createPool(context.target.databaseUrl, { max: 1, applicationName: 'workbench-smoke' });
      try {
        const result = await verifyMesh(pool, mesh.meshId);
        if (!result.valid)
          throw new CheckFailed(
            `the chain is not intact: ${result.forks.length} fork(s)${result.brokenAt ? `, broken at seq ${result.brokenAt.seq}` : ''}`,
          );
      } finally {
        await pool.end();
      }
    },
  },
  {
    name: 'clock-single-authority',
    row: 'meshClocks',
    async run(context) {
      const [a, b] = twoNodes(context);
      const mesh = await context.mesh(2);
      const onA = await context.peer(a.url, mesh, mesh.members[0]!);
      const onB = await context.peer(b.url, mesh, mesh.members[1]!);
      const ticks: number[] = [];
      onB.on('frame', (f) => {
        if (f.type === 'clock.tick') ticks.push(Number(f.tick));
      });
      await onA.request({ type: 'clock.set', speed: 10 });
      const ok = await eventually(() => ticks.length >= 2, 4000);
      await onA.request({ type: 'clock.pause' }).catch(() => {});
      if (!ok) throw new CheckFailed(`a session on ${b.id} got no ticks of a clock set on ${a.id}`);
      for (let i = 1; i < ticks.length; i++) {
        if (ticks[i]! <= ticks[i - 1]!) throw new CheckFailed(`ticks went ${ticks[i - 1]} → ${ticks[i]}`);
      }
    },
  },
  {
    name: 'mcp-cross-node',
    row: 'mcpRegistry + call resolvers',
    async run(context) {
      const [a, b] = twoNodes(context);
      const mesh = await context.mesh(2);
      const host = await context.peer(a.url, mesh, mesh.members[0]!);
      const caller = await context.peer(b.url, mesh, mesh.members[1]!);
      await host.request({
        type: 'mcp.register',
        server: 'smoke',
        tools: [{ name: 'echo', description: '', inputSchema: {} }],
      });
      host.on('frame', (f) => {
        if (f.type === 'mcp.invoke')
          host.write({ type: 'mcp.result', callId: String(f.callId), result: f.args });
      });
      const result = await caller
        .request<Frame & { result?: unknown }>({
          type: 'mcp.call',
          callId: 'c',
          server: 'smoke',
          tool: 'echo',
          args: { x: 1 },
        })
        .catch((error: Error) => {
          throw new CheckFailed(`a call on ${b.id} for a server hosted on ${a.id}: ${error.message}`);
        });
      if (JSON.stringify(result.result) !== '{"x":1}')
        throw new CheckFailed(`unexpected result ${JSON.stringify(result)}`);
    },
  },
  {
    name: 'flags-converged',
    row: 'runtime flags',
    async run(context) {
      const reports = await Promise.all(
        context.target.nodes.map(async (node) => ({
          node: node.id,
          flags: (
            (await (await fetch(`${node.url}/flags`)).json()) as {
              flags: Record<string, { value: boolean; acting: boolean }>;
            }
          ).flags,
        })),
      );
      const [first] = reports;
      for (const report of reports) {
        for (const [flag, state] of Object.entries(report.flags)) {
          if (state.value !== state.acting) throw new CheckFailed(`${report.node} does not act on ${flag}`);
          if (first && first.flags[flag]?.value !== state.value)
            throw new CheckFailed(`${report.node} and ${first.node} disagree on ${flag}`);
        }
      }
    },
  },
];

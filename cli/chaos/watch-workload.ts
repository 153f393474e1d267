/**
 * URL watches under chaos (docs/protocol.md § URL watches): a small HTTP server of the chaos process
 * serves `{"v": "<path>-<n>"}` at a few paths and changes each value every CHANGE_MS (longer than a poll
 * interval, so each change is seen); one member watches each path (`json` mode, `extract: v`, every 5 s,
 * `notifyOn: change`), with a session starting on every node that fails over to the others. The nodes
 * need `WATCH_ALLOW_PRIVATE=true` (the target is on loopback). Recorded in the history: `watch-change`
 * for each value the server takes (the first too: a watch's baseline), `watch-create`, and `watch-fire`
 * for each `watch.triggered` a session got; cli/checkers/watches.ts judges them.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { MeshClient as Client } from '@mesh-broker/sdk';
import { MeshClient, MeshRequestError } from '@mesh-broker/sdk';
import type { Frame, WatchTriggered } from '../../protocol/frames.js';
import type { Recorder } from '../history/writer.js';
import { INDETERMINATE } from '../load/generator.js';
import { createLoadMeshes } from '../load/setup.js';
import { type ChaosCluster, from } from './workloads.js';

const PATHS = ['w1', 'w2'];
export const WATCH_INTERVAL_SEC = 5;
/** Two polls and a bit per value: a change is there for at least one poll even when a poll runs late. */
const CHANGE_MS = 11_000;

export class WatchWorkload {
  created = 0;
  fired = 0;
  changes = 0;
  private readonly values = new Map<string, number>();
  private readonly clients: Client[] = [];
  private timer: ReturnType<typeof setInterval> | undefined;

  private constructor(
    private readonly server: Server,
    readonly baseUrl: string,
    readonly meshId: string,
    private readonly history: Recorder,
  ) {}

  static async start(cluster: ChaosCluster, history?: Recorder): Promise<WatchWorkload> {
    const server = createServer((req, res) => workload.serve(req.url ?? '/', res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const [plan] = await createLoadMeshes(
      { url: cluster.adminUrl, token: cluster.adminToken },
      { peers: 2, meshes: 1 },
    );
    const workload: WatchWorkload = new WatchWorkload(server, baseUrl, plan!.meshId, history);
    for (const path of PATHS) workload.change(path);
    for (let i = 0; i < cluster.nodeWs.length; i++) {
      const name = `watcher@${cluster.nodeWs[i]!.id}`;
      const session = new MeshClient({
        urls: from(cluster, i),
        meshId: plan!.meshId,
        keys: plan!.keys,
        name,
        requestTimeoutMs: 10_000,
        backoff: { initialMs: 100, maxMs: 1000 },
      });
      session.on('watch.triggered', (t: WatchTriggered) => {
        workload.fired++;
        history?.record({
          type: 'ok',
          f: 'watch-fire',
          process: name,
          value: {
            mesh: plan!.meshId,
            watchId: t.watchId,
            url: t.url,
            oldValue: t.oldValue,
            newValue: t.newValue,
            messageId: t.messageId,
          },
        });
      });
      workload.clients.push(session);
      await session.connect();
    }
    for (const path of PATHS) await workload.create(`${baseUrl}/${path}`);
    return workload;
  }

  /** Changes every value each CHANGE_MS until `stop()`. */
  run(): void {
    this.timer = setInterval(() => {
      for (const path of PATHS) this.change(path);
    }, CHANGE_MS);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  async close(): Promise<void> {
    this.stop();
    if (!this.server.listening) return;
    for (const c of this.clients) c.close();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private change(path: string): void {
    const n = (this.values.get(path) ?? 0) + 1;
    this.values.set(path, n);
    this.changes++;
    // Recorded before it is served: a poll can only see a value already in the history.
    this.history?.record({
      type: 'ok',
      f: 'watch-change',
      process: 'watch-target',
      value: { url: `${this.baseUrl}/${path}`, value: `${path}-${n}` },
    });
  }

  private serve(url: string, res: import('node:http').ServerResponse): void {
    const path = url.replace(/^\//, '');
    const n = this.values.get(path);
    if (n === undefined) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ v: `${path}-${n}` }));
  }

  private async create(url: string): Promise<void> {
    const value = { mesh: this.meshId, url, mode: 'json', extract: 'v', intervalSec: WATCH_INTERVAL_SEC };
    this.history?.record({ type: 'invoke', f: 'watch-create', process: 'watcher-creator', value });
    for (let attempt = 1; ; attempt++) {
      try {
        const reply = await this.clients[0]!.request<Frame & { watchId: string }>({
          type: 'watch.create',
          url,
          mode: 'json',
          extract: 'v',
          intervalSec: WATCH_INTERVAL_SEC,
          notifyOn: 'change',
        });
        this.created++;
        this.history?.record({
          type: 'ok',
          f: 'watch-create',
          process: 'watcher-creator',
          value: { ...value, watchId: reply.watchId },
        });
        return;
      } catch (error) {
        const code = error instanceof MeshRequestError ? error.code : 'error';
        this.history?.record({
          type: INDETERMINATE.has(code) ? 'info' : 'fail',
          f: 'watch-create',
          process: 'watcher-creator',
          value: { ...value, error: code },
        });
        // Before the faults start: a refusal here is a setup problem (WATCH_ALLOW_PRIVATE off?), said at once.
        if (attempt >= 3 || !INDETERMINATE.has(code))
          throw new Error(`could not create the watch of ${url}: ${(error as Error).message}`);
      }
    }
  }
}

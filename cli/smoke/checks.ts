/**
 * The smoke suite, in the order it runs: the cross-node checks of this file first, then the checks of
 * background work and limits, and the checks that stop nodes last (each starts its node again).
 */
import { verifyMesh } from '../../broker/audit/verify.js';
import type { Frame } from '../../protocol/frames.js';
import { CuttableLink } from '../proxies/cuttable-link.js';
import { BACKGROUND_CHECKS } from './background-checks.js';
import { type Check, CheckFailed, DELIVERY_WAIT_MS, onTwoNodes } from './check.js';
import { eventually, SkippedByEnvironment } from './context.js';
import { NODE_FAILURE_CHECKS } from './node-failure-checks.js';
import { REGION_CHECKS } from './region-checks.js';

export { CheckFailed };

/** How often lb-sticky-reconnect cuts its peer's connection. */
const STICKY_CUTS = 3;

const CROSS_NODE_CHECKS: Check[] = [
  {
    name: 'cross-node-dm',
    flag: 'ha.delivery',
    needsControl: false,
    async run(context) {
      const { a, b, mesh, onA, onB } = await onTwoNodes(context);
      let got = false;
      onA.on('message', () => {
        got = true;
      });
      await onB.send(mesh.members[0]!.pubkey, 'smoke');
      if (!(await eventually(() => got, DELIVERY_WAIT_MS))) {
        throw new CheckFailed(`a DM sent on ${b.id} did not reach ${a.id} in ${DELIVERY_WAIT_MS / 1000} s`);
      }
    },
  },
  {
    name: 'cross-node-stream',
    flag: 'ha.streams',
    needsControl: false,
    async run(context) {
      const { a, b, onA, onB } = await onTwoNodes(context);
      await onA.request({ type: 'stream.subscribe', stream: 'smoke' });
      let got = false;
      onA.on('frame', (f) => {
        if (f.type === 'stream.data') got = true;
      });
      await onB.request({ type: 'stream.publish', stream: 'smoke', data: 1 });
      if (!(await eventually(() => got, DELIVERY_WAIT_MS))) {
        throw new CheckFailed(`a publish on ${b.id} did not reach a subscriber on ${a.id}`);
      }
    },
  },
  {
    name: 'presence-cluster-wide',
    flag: 'ha.presence',
    needsControl: false,
    async run(context) {
      const { a, b, onA, onB } = await onTwoNodes(context);
      const ok = await eventually(
        async () => (await onA.peers()).some((p) => p.sessionId === onB.sessionId),
        2000,
      );
      if (!ok) throw new CheckFailed(`peers.list on ${a.id} does not show a session on ${b.id}`);
    },
  },
  {
    name: 'audit-chain-intact',
    flag: 'ha.audit',
    needsControl: false,
    async run(context) {
      const { mesh, onA, onB } = await onTwoNodes(context);
      // Appends from both nodes, interleaved: each node has had the chain's head before the other moves it.
      for (let i = 0; i < 3; i++) {
        await onA.send(mesh.members[1]!.pubkey, `a${i}`);
        await onA.request({ type: 'audit.query', limit: 1 });
        await onB.send(mesh.members[0]!.pubkey, `b${i}`);
        await onB.request({ type: 'audit.query', limit: 1 });
      }
      const result = await verifyMesh(context.db(), mesh.meshId);
      if (!result.valid) {
        const broken = result.brokenAt ? `, broken at seq ${result.brokenAt.seq}` : '';
        throw new CheckFailed(`the chain is not intact: ${result.forks.length} fork(s)${broken}`);
      }
    },
  },
  {
    name: 'clock-single-authority',
    flag: 'ha.clock',
    needsControl: false,
    async run(context) {
      const { a, b, onA, onB } = await onTwoNodes(context);
      // One authority: the ticks a session on b sees are the very ticks (tick, epoch) a session on a sees.
      const seenOnA = new Set<string>();
      const seenOnB: Array<{ tick: number; key: string }> = [];
      onA.on('frame', (f) => {
        if (f.type === 'clock.tick') seenOnA.add(`${f.epoch}:${f.tick}`);
      });
      onB.on('frame', (f) => {
        if (f.type === 'clock.tick') seenOnB.push({ tick: Number(f.tick), key: `${f.epoch}:${f.tick}` });
      });
      await onA.request({ type: 'clock.set', speed: 10 });
      const ok = await eventually(() => seenOnB.filter((t) => seenOnA.has(t.key)).length >= 2, 4000);
      // Two clocks started from the same row can tick the same numbers: ask each node who leads.
      const [onAStatus, onBStatus] = await Promise.all(
        [onA, onB].map((peer) =>
          peer.request<Frame & { leader: string | null }>({ type: 'clock.get' }).catch(() => undefined),
        ),
      );
      await onA.request({ type: 'clock.pause' }).catch(() => {});
      if (onAStatus?.leader !== onBStatus?.leader) {
        throw new CheckFailed(
          `two clocks: ${a.id} says ${onAStatus?.leader} leads, ${b.id} says ${onBStatus?.leader}`,
        );
      }
      if (!ok)
        throw new CheckFailed(`a session on ${b.id} did not get the ticks of the clock set on ${a.id}`);
      const foreign = seenOnB.find((t) => !seenOnA.has(t.key));
      if (foreign)
        throw new CheckFailed(`${b.id} saw tick ${foreign.key} that ${a.id} never saw: two clocks`);
      for (let i = 1; i < seenOnB.length; i++) {
        if (seenOnB[i]!.tick <= seenOnB[i - 1]!.tick)
          throw new CheckFailed(`ticks went ${seenOnB[i - 1]!.tick} → ${seenOnB[i]!.tick}`);
      }
    },
  },
  {
    name: 'mcp-cross-node',
    flag: 'ha.mcp',
    needsControl: false,
    async run(context) {
      const { a, b, onA: host, onB: caller } = await onTwoNodes(context);
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
    flag: null,
    property: 'runtime flags',
    needsControl: false,
    async run(context) {
      const reports = await Promise.all(
        context.target.nodes.map(async (node) => {
          const response = await fetch(`${node.url}/flags`);
          const body = (await response.json()) as {
            flags: Record<string, { value: boolean; acting: boolean }>;
          };
          return { node: node.id, flags: body.flags };
        }),
      );
      const [first] = reports;
      for (const report of reports) {
        for (const [flag, state] of Object.entries(report.flags)) {
          if (state.value !== state.acting) throw new CheckFailed(`${report.node} does not act on ${flag}`);
          if (first && first.flags[flag]?.value !== state.value) {
            throw new CheckFailed(`${report.node} and ${first.node} disagree on ${flag}`);
          }
        }
      }
    },
  },
  {
    name: 'lb-sticky-reconnect',
    flag: null,
    property: 'sessions (sticky reconnects)',
    needsControl: false,
    async run(context) {
      // The peer reaches the load balancer through a link the check can cut, as a network drop would.
      const link = await CuttableLink.start(context.target.lbUrl);
      try {
        const mesh = await context.mesh(1);
        const peer = await context.peer(link.httpUrl, mesh, mesh.members[0]!);
        const pin = link.cookiesSet()[0];
        if (pin === undefined)
          throw new SkippedByEnvironment(
            'the load balancer sets no cookie on the upgrade: nothing pins a peer',
          );
        const home = peer.node;
        for (let cut = 1; cut <= STICKY_CUTS; cut++) {
          const back = peer.next('welcome', () => true, DELIVERY_WAIT_MS);
          link.cut();
          const node = (await back.catch(() => undefined))?.node;
          if (node !== home) {
            throw new CheckFailed(
              `after cut ${cut} the peer came back on ${node ?? 'no node'} within ${DELIVERY_WAIT_MS / 1000} s, not on ${home} (cookies sent: ${JSON.stringify(link.cookiesSent())})`,
            );
          }
        }
        return `${STICKY_CUTS} reconnects through the load balancer came back to ${home} (${pin.split(';')[0]})`;
      } finally {
        await link.close();
      }
    },
  },
];

export const CHECKS: Check[] = [
  ...CROSS_NODE_CHECKS,
  ...REGION_CHECKS,
  ...BACKGROUND_CHECKS,
  ...NODE_FAILURE_CHECKS,
];

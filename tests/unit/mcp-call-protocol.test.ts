/**
 * The MCP call protocol (broker/mcp/call-protocol.ts), on nodes joined by an in-memory transport: the
 * transport is what differs between the local and the shared registry, so here it is a map of nodes that
 * delivers on a later microtask (as a bus would), and can lose a node. What is checked is the protocol:
 * broker-made call ids, the one `mcp.call_result` per call with the caller's callId and rid, only the host
 * answering, the timeout, host-gone failures, an unreachable host node, and stopping.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { McpInvoke } from '../../broker/bus/messages.js';
import {
  type CallTransport,
  McpCallProtocol,
  ROUTED_MARGIN_MS,
  SINGLE_NODE,
} from '../../broker/mcp/call-protocol.js';
import { type CallOutcome, type McpSink, STOPPED_ROUTING } from '../../broker/mcp/mcp.js';
import type { SessionIdentity } from '../../protocol/routes.js';

const TIMEOUT_MS = 1000;

afterEach(() => {
  vi.useRealTimers();
});

function identity(sessionId: string, pubkey = `pk-${sessionId}`): SessionIdentity {
  return { meshId: 'mesh', memberId: 1, pubkey, sessionId, name: null, groups: [] };
}

/** One node: its protocol, the sessions whose sockets it holds, the frames it wrote, the calls it counted. */
interface TestNode {
  protocol: McpCallProtocol;
  sockets: Set<string>;
  sent: Array<{ sessionId: string; frame: Record<string, unknown> }>;
  ended: CallOutcome[];
}

/** Nodes joined in memory; `down` nodes cannot be reached (publish answers false, as the bus does). */
function cluster(lateAnswers: 'refused' | 'accepted' = 'accepted') {
  const nodes = new Map<string, TestNode>();
  const down = new Set<string>();
  const reachable = (node: string) => (down.has(node) ? undefined : nodes.get(node));
  const transport: CallTransport = {
    toHost: async (hostNode, invoke) => {
      const target = reachable(hostNode);
      if (!target) return false;
      queueMicrotask(() => target.protocol.receive(structuredClone(invoke)));
      return true;
    },
    toCaller: async (callerNode, invokeId, outcome) => {
      const target = reachable(callerNode);
      if (target) queueMicrotask(() => target.protocol.settle(invokeId, structuredClone(outcome)));
    },
  };
  const node = (nodeId: string, sockets: string[] = []): TestNode => {
    const sent: TestNode['sent'] = [];
    const ended: CallOutcome[] = [];
    const socketSet = new Set(sockets);
    const sink: McpSink = {
      send: (sessionId, frame) => void sent.push({ sessionId, frame: frame as Record<string, unknown> }),
      reaches: (sessionId) => socketSet.has(sessionId),
      callEnded: (outcome) => void ended.push(outcome),
    };
    const created: TestNode = {
      protocol: new McpCallProtocol({ nodeId, sink, callTimeoutMs: TIMEOUT_MS, transport, lateAnswers }),
      sockets: socketSet,
      sent,
      ended,
    };
    nodes.set(nodeId, created);
    return created;
  };
  return { node, down };
}

const caller = identity('caller-session');
const host = identity('host-session');
const call = { callId: 'c-1', server: 'calc', tool: 'add', args: { n: 1 }, rid: 'r-1' };

/**
 * Lets the in-memory transport deliver what is queued: it delivers in microtasks, and the microtask queue
 * (with whatever those deliveries queue in turn) is drained before the next turn of the event loop. No time
 * passes: one turn, not a sleep.
 */
const delivered = () => new Promise<void>((resolve) => setImmediate(resolve));

function invokesOf(node: TestNode) {
  return node.sent
    .filter((s) => s.frame.type === 'mcp.invoke')
    .map((s) => s.frame as unknown as McpInvoke['frame']);
}

function resultsOf(node: TestNode) {
  return node.sent.filter((s) => s.frame.type === 'mcp.call_result');
}

describe('MCP call protocol', () => {
  it('carries a call to the host on another node with a broker-made callId, and its one answer back', async () => {
    const { node } = cluster();
    const a = node('a', [caller.sessionId]);
    const b = node('b', [host.sessionId]);
    await a.protocol.start(caller, call, { hostSession: host.sessionId, hostNode: 'b' });
    await delivered();
    const [invoke] = invokesOf(b);
    expect(invoke).toMatchObject({ server: 'calc', tool: 'add', args: { n: 1 }, caller: caller.pubkey });
    expect(invoke!.callId).not.toBe(call.callId);
    expect(b.sent[0]!.sessionId).toBe(host.sessionId);

    await b.protocol.hostAnswered(host, { callId: invoke!.callId, result: 2 });
    await delivered();
    expect(resultsOf(a)).toEqual([
      {
        sessionId: caller.sessionId,
        frame: { type: 'mcp.call_result', callId: 'c-1', result: 2, rid: 'r-1' },
      },
    ]);
    expect(a.ended).toEqual(['result']);
    expect(b.ended).toEqual([]);
    // Answered: a second answer is refused and no second result is written.
    await expect(b.protocol.hostAnswered(host, { callId: invoke!.callId, result: 3 })).rejects.toMatchObject({
      code: 'not_found',
    });
    await delivered();
    expect(resultsOf(a)).toHaveLength(1);
  });

  it('only the host session may answer; an unknown call id is not_found', async () => {
    const { node } = cluster();
    const a = node('a', [caller.sessionId, host.sessionId]);
    await a.protocol.start(
      caller,
      { ...call, rid: undefined },
      { hostSession: host.sessionId, hostNode: 'a' },
    );
    const [invoke] = invokesOf(a);
    await expect(
      a.protocol.hostAnswered(caller, { callId: invoke!.callId, result: 0 }),
    ).rejects.toMatchObject({ code: 'forbidden' });
    await expect(a.protocol.hostAnswered(host, { callId: 'nope', result: 0 })).rejects.toMatchObject({
      code: 'not_found',
    });
    await a.protocol.hostAnswered(host, { callId: invoke!.callId, error: 'bad args' });
    // No rid on the request: none on the answer; an error of the host is an `error` outcome.
    expect(resultsOf(a).map((r) => r.frame)).toEqual([
      { type: 'mcp.call_result', callId: 'c-1', error: 'bad args' },
    ]);
    expect(a.ended).toEqual(['error']);
  });

  it('times out on the caller node; a late answer is taken within the margin (over a transport), then not_found', async () => {
    vi.useFakeTimers();
    const { node } = cluster('accepted');
    const a = node('a', [caller.sessionId]);
    const b = node('b', [host.sessionId]);
    await a.protocol.start(caller, call, { hostSession: host.sessionId, hostNode: 'b' });
    await vi.advanceTimersByTimeAsync(TIMEOUT_MS - 1);
    expect(resultsOf(a)).toHaveLength(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(resultsOf(a).map((r) => r.frame)).toEqual([
      { type: 'mcp.call_result', callId: 'c-1', error: 'timeout', rid: 'r-1' },
    ]);
    expect(a.ended).toEqual(['timeout']);
    const [invoke] = invokesOf(b);
    await b.protocol.hostAnswered(host, { callId: invoke!.callId, result: 2 });
    await vi.advanceTimersByTimeAsync(0);
    expect(resultsOf(a)).toHaveLength(1);

    await a.protocol.start(caller, call, { hostSession: host.sessionId, hostNode: 'b' });
    await vi.advanceTimersByTimeAsync(TIMEOUT_MS + ROUTED_MARGIN_MS);
    const late = invokesOf(b)[1]!;
    await expect(b.protocol.hostAnswered(host, { callId: late.callId, result: 2 })).rejects.toMatchObject({
      code: 'not_found',
    });
  });

  it('on a single node both ends are in process: the invoke is written at once, a late answer is not_found', async () => {
    vi.useFakeTimers();
    const sent: Array<{ sessionId: string; frame: Record<string, unknown> }> = [];
    const ended: CallOutcome[] = [];
    const protocol = new McpCallProtocol({
      nodeId: 'local',
      sink: {
        send: (sessionId, frame) => void sent.push({ sessionId, frame: frame as Record<string, unknown> }),
        reaches: () => true,
        callEnded: (outcome) => void ended.push(outcome),
      },
      callTimeoutMs: TIMEOUT_MS,
      transport: SINGLE_NODE,
      lateAnswers: 'refused',
    });
    const started = protocol.start(caller, call, { hostSession: host.sessionId, hostNode: 'local' });
    expect(sent.map((s) => s.frame.type)).toEqual(['mcp.invoke']);
    await started;
    await vi.advanceTimersByTimeAsync(TIMEOUT_MS);
    expect(ended).toEqual(['timeout']);
    const invokeId = sent[0]!.frame.callId as string;
    await expect(protocol.hostAnswered(host, { callId: invokeId, result: 1 })).rejects.toMatchObject({
      code: 'not_found',
    });
  });

  it('fails at once the calls whose host went, and only those', async () => {
    const { node } = cluster();
    const other = identity('other-host');
    const a = node('a', [caller.sessionId]);
    const b = node('b', [host.sessionId, other.sessionId]);
    await a.protocol.start(caller, call, { hostSession: host.sessionId, hostNode: 'b' });
    await a.protocol.start(
      caller,
      { ...call, callId: 'c-2' },
      { hostSession: other.sessionId, hostNode: 'b' },
    );
    await delivered();
    b.protocol.failRouted(
      (routed) => routed.hostSession === host.sessionId,
      'host_left: the host disconnected',
    );
    await delivered();
    expect(resultsOf(a).map((r) => r.frame)).toEqual([
      { type: 'mcp.call_result', callId: 'c-1', error: 'host_left: the host disconnected', rid: 'r-1' },
    ]);
    // The other host's call still waits, and its answer still reaches the caller.
    const otherInvoke = b.sent.find((s) => s.sessionId === other.sessionId)!.frame;
    await b.protocol.hostAnswered(other, { callId: otherInvoke.callId as string, result: 5 });
    await delivered();
    expect(resultsOf(a).map((r) => [r.frame.callId, r.frame.result ?? r.frame.error])).toEqual([
      ['c-1', 'host_left: the host disconnected'],
      ['c-2', 5],
    ]);
  });

  it('answers unavailable when the host node cannot be reached, host_left when the host is not on its node', async () => {
    const { node, down } = cluster();
    const a = node('a', [caller.sessionId]);
    node('b', []);
    node('c', [host.sessionId]);
    down.add('c');
    await a.protocol.start(caller, call, { hostSession: host.sessionId, hostNode: 'c' });
    await a.protocol.start(
      caller,
      { ...call, callId: 'c-2' },
      { hostSession: host.sessionId, hostNode: 'b' },
    );
    await delivered();
    expect(resultsOf(a).map((r) => [r.frame.callId, r.frame.error])).toEqual([
      ['c-1', 'unavailable: the host node cannot be reached'],
      ['c-2', 'host_left: the host is not connected'],
    ]);
    expect(a.ended).toEqual(['error', 'error']);
  });

  it('stopping answers the callers waiting here, and fails toward their nodes the calls routed here', async () => {
    const { node } = cluster();
    const a = node('a', [caller.sessionId, host.sessionId]);
    const b = node('b', [caller.sessionId, host.sessionId]);
    await a.protocol.start(caller, call, { hostSession: host.sessionId, hostNode: 'b' });
    await b.protocol.start(
      caller,
      { ...call, callId: 'c-2' },
      { hostSession: host.sessionId, hostNode: 'a' },
    );
    await delivered();
    b.protocol.stop('host_left: stopped');
    await delivered();
    expect(resultsOf(b).map((r) => [r.frame.callId, r.frame.error])).toEqual([['c-2', STOPPED_ROUTING]]);
    expect(resultsOf(a).map((r) => [r.frame.callId, r.frame.error])).toEqual([['c-1', 'host_left: stopped']]);
  });
});

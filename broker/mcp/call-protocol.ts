/**
 * The MCP call protocol, written once (issue 29), as socket.io's adapter writes its protocol once over
 * every transport: call ids, pending calls, reply matching, the timeout, the failures when a host goes,
 * and the one `mcp.call_result` a caller gets. The registries (mcp.local.ts, mcp.shared.ts) decide where a
 * server is; this module carries a call to it and its answer back.
 *
 * A call has two ends, which may sit on two nodes:
 * - the caller's end (`waiting`): the caller's node allocates the broker-made invoke id, owns the
 *   timeout and writes the caller's one `mcp.call_result` (and counts it in `callEnded`);
 * - the host's end (`routed`): the host's node hands `mcp.invoke` to the host session, matches the host's
 *   `mcp.result` to the call (only the host session may answer), and fails the calls it routed when the
 *   host goes (socket closed, server unregistered, member revoked, routing stopped).
 * Both ends on this node talk in process; to another node they go through the `CallTransport` (the bus
 * for the shared registry; none for the local one, which is a single node).
 */
import { randomUUID } from 'node:crypto';
import { ProtocolError } from '../../protocol/errors.js';
import type { McpInvoke } from '../bus/messages.js';
import type { SessionIdentity } from '../connections/connection.js';
import {
  callResultFrame,
  type McpCall,
  type McpResult,
  type McpSink,
  outcomeOf,
  STOPPED_ROUTING,
} from './mcp.js';

/** What a caller is answered: the host's result, or an error (`timeout`, `host_left: …`, `unavailable: …`). */
export type CallAnswer = { result?: unknown; error?: string };

/** Carries the two messages of the protocol to another node. */
export interface CallTransport {
  /** Hands an invoke to the host's node; false when that node cannot be reached. */
  toHost(hostNode: string, invoke: McpInvoke): Promise<boolean>;
  /** Takes an outcome back to the caller's node (a lost answer ends in the caller's timeout). */
  toCaller(callerNode: string, invokeId: string, outcome: CallAnswer): Promise<void>;
}

/** A transport for a single node: every call and every answer stays in process. */
export const SINGLE_NODE: CallTransport = {
  toHost: async () => false,
  toCaller: async () => {},
};

/** Where a call is hosted, as the registry found it. */
export interface CallHost {
  hostSession: string;
  /** The node holding the host's socket. */
  hostNode: string;
}

/** A call waiting on this (the caller's) node for its result. */
interface WaitingCall {
  callerSession: string;
  callerCallId: string;
  rid: string | undefined;
  timer: NodeJS.Timeout;
}

/** A call this (the host's) node handed to its host session, and where the answer goes. */
export interface RoutedCall {
  callerNode: string;
  hostSession: string;
  server: string;
  /** Forgets the call once the caller has given up on it (its timeout, plus a margin); see `lateAnswers`. */
  expiry?: NodeJS.Timeout;
}

/** How long the host's end remembers a call after the caller's end stopped waiting (see constructor). */
export const ROUTED_MARGIN_MS = 5000;

export interface CallProtocolOptions {
  nodeId: string;
  sink: McpSink;
  callTimeoutMs: number;
  transport: CallTransport;
  /**
   * When the host's end forgets a call. `refused`: with the caller's end, which is the same process (the
   * local registry): an answer after the timeout is `not_found`. `accepted`: the host's node cannot hear of
   * the caller's timeout on another node, so it keeps the call for the timeout plus ROUTED_MARGIN_MS and
   * takes a late answer (the caller's end then drops it).
   */
  lateAnswers: 'refused' | 'accepted';
}

export class McpCallProtocol {
  /** invoke id → the caller's end, on this node */
  private readonly waiting = new Map<string, WaitingCall>();
  /** invoke id → the host's end, on this node */
  private readonly routed = new Map<string, RoutedCall>();

  constructor(private readonly options: CallProtocolOptions) {}

  /** The caller's end: sends the call to its host (checked callable by the registry) and starts waiting. */
  async start(caller: SessionIdentity, call: McpCall, host: CallHost): Promise<void> {
    const { nodeId, callTimeoutMs, transport } = this.options;
    const invokeId = randomUUID();
    const timer = setTimeout(() => this.settle(invokeId, { error: 'timeout' }), callTimeoutMs);
    timer.unref();
    this.waiting.set(invokeId, {
      callerSession: caller.sessionId,
      callerCallId: call.callId,
      rid: call.rid,
      timer,
    });
    const invoke: McpInvoke = {
      invokeId,
      callerNode: nodeId,
      hostSession: host.hostSession,
      server: call.server,
      frame: {
        type: 'mcp.invoke',
        callId: invokeId,
        server: call.server,
        tool: call.tool,
        args: call.args,
        caller: caller.pubkey,
      },
    };
    if (host.hostNode === nodeId) this.receive(invoke);
    else if (!(await transport.toHost(host.hostNode, invoke))) {
      this.settle(invokeId, { error: 'unavailable: the host node cannot be reached' });
    }
  }

  /**
   * The host's end: hands the invoke to the host session, remembering where the answer goes. A host
   * whose socket is not on this node is answered `host_left` at once (for the local registry this only
   * differs in the moment between a socket's close and its `hostDisconnected`, which answers `host_left`
   * too).
   */
  receive(invoke: McpInvoke): void {
    const { invokeId } = invoke;
    const call: RoutedCall = {
      callerNode: invoke.callerNode,
      hostSession: invoke.hostSession,
      server: invoke.server,
    };
    if (this.options.lateAnswers === 'accepted') {
      call.expiry = setTimeout(
        () => this.routed.delete(invokeId),
        this.options.callTimeoutMs + ROUTED_MARGIN_MS,
      );
      call.expiry.unref();
    }
    this.routed.set(invokeId, call);
    if (!this.options.sink.reaches(call.hostSession)) {
      this.forget(invokeId);
      void this.answer(invokeId, call.callerNode, { error: 'host_left: the host is not connected' });
      return;
    }
    this.options.sink.send(call.hostSession, invoke.frame);
  }

  /** The host's end: the host session's `mcp.result`; only the host of a call it still knows may answer. */
  async hostAnswered(host: SessionIdentity, result: McpResult): Promise<void> {
    const call = this.routed.get(result.callId);
    if (!call) throw new ProtocolError('not_found', `no pending call ${result.callId}`);
    if (call.hostSession !== host.sessionId)
      throw new ProtocolError('forbidden', 'only the host may answer its calls');
    this.forget(result.callId);
    await this.answer(
      result.callId,
      call.callerNode,
      result.error === undefined ? { result: result.result } : { error: result.error },
    );
  }

  /** The host's end: fails now the calls routed here that `match` (the host went), with `error`. */
  failRouted(match: (call: RoutedCall) => boolean, error: string): void {
    for (const [invokeId, call] of this.routed) {
      if (!match(call)) continue;
      this.forget(invokeId);
      void this.answer(invokeId, call.callerNode, { error });
    }
  }

  /**
   * This node stops routing calls (a flip or a shutdown): every caller waiting here gets STOPPED_ROUTING,
   * then every call routed here is failed with `hostError` toward its caller's node.
   */
  stop(hostError: string): void {
    for (const invokeId of [...this.waiting.keys()]) this.settle(invokeId, { error: STOPPED_ROUTING });
    this.failRouted(() => true, hostError);
  }

  /** The caller's end: the one `mcp.call_result` of a call (a second outcome for it is dropped). */
  settle(invokeId: string, outcome: CallAnswer): void {
    const call = this.waiting.get(invokeId);
    if (!call) return;
    this.waiting.delete(invokeId);
    clearTimeout(call.timer);
    if (this.options.lateAnswers === 'refused') this.forget(invokeId);
    this.options.sink.send(call.callerSession, callResultFrame(call, outcome));
    this.options.sink.callEnded(outcomeOf(outcome));
  }

  private forget(invokeId: string): void {
    clearTimeout(this.routed.get(invokeId)?.expiry);
    this.routed.delete(invokeId);
  }

  /** The host's end sends an outcome to the caller's end: in process when it is here. */
  private async answer(invokeId: string, callerNode: string, outcome: CallAnswer): Promise<void> {
    if (callerNode === this.options.nodeId) this.settle(invokeId, outcome);
    else await this.options.transport.toCaller(callerNode, invokeId, outcome);
  }
}

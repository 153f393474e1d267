/**
 * The WebSocket gateway: one socket's life on this node. It admits the hello, then reads frames one at a
 * time (so a sender's frames are handled in the order sent), hands each to the router, and turns errors
 * into `error` frames or close codes. It knows no feature: features register on the router.
 */
import type { FastifyRequest } from 'fastify';
import type { RawData, WebSocket } from 'ws';
import { CloseCode, type ErrorCode, ProtocolError } from '../../protocol/errors.js';
import type { ErrorFrame, ReplyFrame, Welcome } from '../../protocol/frames.js';
import { parseJsonObject, parseWith, ridOf } from '../../protocol/parse.js';
import { helloFrame } from '../../protocol/requests.js';
import type { ConnectionCap } from '../connection-cap/connection-cap.js';
import type { SessionIdentity } from '../connections/connection.js';
import { Connection } from '../connections/connection.js';
import type { ConnectionRegistry } from '../connections/registry.js';
import { isDatabaseUnreachable, isNotPrimary } from '../db/errors.js';
import { asOperation } from '../db/round-trips.js';
import type { SessionFeed } from '../delivery/feed.js';
import type { HelloAdmission } from '../hello/admission.js';
import { HelloRejected } from '../hello/admission.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';
import type { Presence } from '../presence/presence.js';
import { PeriodicTask } from '../timing/periodic.js';
import { InboundFrames } from './inbound.js';
import { closePaced } from './paced-close.js';
import type { Router } from './router.js';

/** A socket that has not said hello by then is closed. */
const HELLO_TIMEOUT_MS = 10_000;
/** A socket that sends this many bad frames within a minute is abusing the protocol and is closed (4400). */
const ERROR_BUDGET_PER_MINUTE = 100;
/** Frames of one socket queued before it stops being read (broker/ws/inbound.ts). */
const MAX_QUEUED_FRAMES = 64;
/**
 * The largest reply a request may get. A reply is bounded where it is built (lists are paged); this is the
 * backstop: a reply past it is refused with `too_large` instead of being buffered for the peer.
 */
export const MAX_REPLY_BYTES = 1024 * 1024;
/** Error codes that mean the frame itself was wrong (logged at info), as opposed to a refusal. */
const BAD_INPUT = new Set<ErrorCode>(['bad_request', 'unknown_type', 'no_hello']);

export interface GatewayOptions {
  nodeId: string;
  heartbeatMs: number;
  admission: HelloAdmission;
  presence: Presence;
  cap: ConnectionCap;
  connections: ConnectionRegistry;
  router: Router;
  metrics: BrokerMetrics;
  log: Logger;
  /** Sockets of one source address without a hello yet; one more is closed with 4429. */
  pendingPerAddress: number;
  /** Frames per second one socket may have handled, and its burst (a faster sender is paced). */
  frameRate: { perSec: number; burst: number };
  /** The session's ordered feed (delivery/feed.ts), made when its hello is accepted. */
  openFeed: (connection: Connection, memberId: number) => SessionFeed;
  /** Runs before `welcome` (the session's channels and hooks); the feed starts after the welcome. */
  onSessionStart: (connection: Connection) => Promise<void>;
  /** Runs when a session's current socket closed (not when replaced, not while draining). */
  onSocketClosed: (identity: SessionIdentity) => Promise<void>;
  /** Runs for every socket that had been welcomed, whatever ended it. */
  onConnectionGone: (identity: SessionIdentity) => void;
}

export class Gateway {
  private draining = false;
  private readonly liveness: PeriodicTask;
  /** Each socket's inbound frames, while it has any: what a drain waits for. */
  private readonly queues = new Map<Connection, InboundFrames>();
  /** Each socket's replies still to send, in request order (pipelined requests answer later). */
  private readonly replies = new Map<Connection, Promise<void>>();

  constructor(private readonly options: GatewayOptions) {
    // A peer whose network died says nothing; a WebSocket ping it cannot answer within one interval
    // ends its socket, so its presence enters the grace period instead of lingering forever.
    this.liveness = new PeriodicTask({
      everyMs: options.heartbeatMs,
      run: () => this.checkLiveness(),
      onError: { log: options.log, message: 'liveness check failed' },
    });
    this.liveness.start();
  }

  accept(socket: WebSocket, request: FastifyRequest): void {
    const { connections, log } = this.options;
    if (this.draining) {
      socket.close(CloseCode.draining, 'node draining');
      return;
    }
    const connection = new Connection(
      socket,
      request.ip,
      log.child({ remote: request.ip }),
      () => connections.socketCount,
    );
    // An unauthenticated socket costs a slot of its address until it says hello: one address cannot hold
    // the node's sockets with connections that never authenticate.
    if (connections.pendingFrom(request.ip) >= this.options.pendingPerAddress) {
      this.options.metrics.helloRejections.inc({ reason: 'too many pending hellos' });
      socket.close(CloseCode.tooManyPendingHellos, 'too many sockets without a hello from this address');
      return;
    }
    connections.addPending(connection);
    const helloTimer = setTimeout(() => {
      if (!connection.identity) connection.close(CloseCode.helloRejected, 'no hello in time');
    }, HELLO_TIMEOUT_MS);
    helloTimer.unref();

    let errors = 0;
    let errorWindowStart = Date.now();
    const countError = () => {
      if (Date.now() - errorWindowStart > 60_000) {
        errors = 0;
        errorWindowStart = Date.now();
      }
      if (++errors > ERROR_BUDGET_PER_MINUTE)
        connection.close(CloseCode.protocolAbuse, 'too many bad frames');
    };

    // One frame at a time per socket: keeps per-sender order and bounds a socket's concurrency to one.
    const inbound = new InboundFrames(
      socket,
      connection,
      (data, isBinary) => this.onFrame(connection, data, isBinary, countError),
      {
        maxQueued: MAX_QUEUED_FRAMES,
        ratePerSec: this.options.frameRate.perSec,
        burst: this.options.frameRate.burst,
      },
      (reason) => this.options.metrics.inboundPauses.inc({ reason }),
    );
    this.queues.set(connection, inbound);
    socket.on('message', (data: RawData, isBinary: boolean) => inbound.push(data, isBinary));
    socket.on('close', () => {
      clearTimeout(helloTimer);
      inbound
        .close(() => this.onClose(connection))
        .finally(() => {
          this.queues.delete(connection);
          this.replies.delete(connection);
        });
    });
    socket.on('pong', () => {
      connection.alive = true;
    });
    socket.on('error', (error) => log.debug({ err: error, connection: connection.id }, 'socket error'));
  }

  /**
   * Drain: refuse new sockets, tell every peer to reconnect elsewhere (1001), at most `closePerSec` a second
   * (DRAIN_CLOSE_PER_SEC, paced-close.ts) and all within half of `timeoutMs` (DRAIN_TIMEOUT_MS),
   * then wait for the frames already being handled (a `send` being committed) until `timeoutMs` is up.
   * Sockets not closed yet keep being served meanwhile.
   */
  async drain(timeoutMs: number, closePerSec: number): Promise<void> {
    this.draining = true;
    const deadline = Date.now() + timeoutMs;
    void this.liveness.stop();
    await closePaced(
      [...this.options.connections.all()],
      (connection) => connection.close(CloseCode.draining, 'node draining'),
      closePerSec,
      timeoutMs / 2,
    );
    const leftMs = Math.max(0, deadline - Date.now());
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), leftMs);
    });
    const settled = Promise.allSettled([
      ...[...this.queues.values()].map((inbound) => inbound.settled),
      ...this.replies.values(),
    ]).then(() => 'done' as const);
    const outcome = await Promise.race([settled, timeout]);
    clearTimeout(timer);
    if (outcome === 'timeout')
      this.options.log.warn(
        { sockets: this.queues.size, timeoutMs },
        'drain: frames still in flight; stopping anyway',
      );
  }

  private checkLiveness(): void {
    for (const connection of this.options.connections.all()) {
      if (!connection.alive) {
        connection.log.info({ connection: connection.id }, 'peer did not answer a ping; dropping its socket');
        connection.socket.terminate();
        continue;
      }
      connection.alive = false;
      if (connection.isOpen) connection.socket.ping();
    }
  }

  private async onFrame(connection: Connection, data: RawData, isBinary: boolean, countError: () => void) {
    // A frame handled is a sign of life: while the node does not read a socket (inbound.ts) its pongs
    // wait unread too, and a peer whose frames are being worked through must not count as dead.
    connection.alive = true;
    let rid: string | undefined;
    try {
      if (isBinary) throw new ProtocolError('bad_request', 'binary frames are not part of the protocol');
      const frame = parseJsonObject(data.toString());
      rid = ridOf(frame);
      if (typeof frame.type !== 'string') throw new ProtocolError('bad_request', 'missing field "type"');
      if (!connection.identity) {
        if (frame.type !== 'hello') throw new ProtocolError('no_hello', 'the first frame must be a hello');
        // Labelled, so the metric says what one hello costs in Postgres round trips (db/round-trips.ts).
        await asOperation('hello', () => this.hello(connection, frame));
        return;
      }
      // One check for every frame type: a revoked member's socket (closing, or not closing yet because
      // its peer ignores the close) gets nothing done, whatever it asks.
      if (connection.revoked) throw new ProtocolError('forbidden', 'member revoked');
      if (frame.type === 'hello')
        throw new ProtocolError('bad_request', 'hello already accepted on this socket');
      const { router } = this.options;
      if (!router.has(frame.type)) {
        throw new ProtocolError('unknown_type', `unknown frame type "${frame.type.slice(0, 64)}"`);
      }
      // A request that is not pipelined sees every earlier request of its socket answered first (a query
      // after a send sees the send committed).
      if (!router.isPipelined(frame.type)) await this.replies.get(connection);
      const handled = await router.handle(frame.type, frame, { identity: connection.identity, rid });
      this.reply(
        connection,
        rid,
        'now' in handled ? Promise.resolve(handled.now) : handled.later,
        countError,
      );
    } catch (error) {
      if (error instanceof HelloRejected) {
        this.options.metrics.helloRejections.inc({ reason: error.reason });
        connection.close(error.closeCode, error.reason);
        return;
      }
      if (!connection.welcomed && !(error instanceof ProtocolError)) {
        // The hello failed on our side (database, Redis): the peer should come back, not give up on a
        // 4401 from the hello timer, nor wait for a welcome that never comes.
        connection.log.error({ err: error, connection: connection.id }, 'hello failed on the node');
        connection.close(CloseCode.internal, 'internal error, retry');
        return;
      }
      this.reply(connection, rid, Promise.reject(error), countError);
    }
  }

  /** Sends a request's reply (or its error) after every earlier reply of the socket: replies keep their order. */
  private reply(
    connection: Connection,
    rid: string | undefined,
    outcome: Promise<ReplyFrame | undefined>,
    countError: () => void,
  ): void {
    // Handled below once the earlier replies are out; marked handled now, so that a refusal waiting its
    // turn is never an unhandled rejection (which would end the process).
    outcome.catch(() => {});
    const next = (this.replies.get(connection) ?? Promise.resolve())
      .then(() => outcome)
      .then((reply) => (reply ? serializeReply(reply, rid) : undefined))
      .then(
        (text) => {
          if (text !== undefined) connection.sendText(text);
        },
        (error: unknown) => this.sendError(connection, rid, error, countError),
      );
    this.replies.set(connection, next);
  }

  private sendError(
    connection: Connection,
    rid: string | undefined,
    error: unknown,
    countError: () => void,
  ): void {
    const unreachable = !(error instanceof ProtocolError) && isDatabaseUnreachable(error);
    if (unreachable) {
      connection.log.warn(
        { err: (error as Error).message, connection: connection.id },
        'database unreachable',
      );
    } else if (!(error instanceof ProtocolError)) {
      connection.log.error({ err: error, connection: connection.id }, 'request failed');
    } else if (BAD_INPUT.has(error.code)) {
      // The peer's mistake, not the node's: one line at info, no stack.
      connection.log.info(
        { connection: connection.id, code: error.code, reason: error.message },
        'bad frame',
      );
    }
    const code = error instanceof ProtocolError ? error.code : unreachable ? 'unavailable' : 'internal';
    const message =
      error instanceof ProtocolError
        ? error.message
        : unreachable
          ? `${isNotPrimary(error) ? 'the database server is not the primary of record' : 'the database is unreachable'}; retry (a send retried with the same id is stored once)`
          : 'internal error';
    this.options.metrics.frameErrors.inc({ code });
    connection.send({
      type: 'error',
      code,
      message,
      ...(rid === undefined ? {} : { rid }),
    } satisfies ErrorFrame);
    countError();
  }

  private async hello(connection: Connection, frame: Record<string, unknown>): Promise<void> {
    const { admission, connections, presence, metrics, nodeId, heartbeatMs } = this.options;
    const hello = parseWith(helloFrame, frame);
    const identity = await admission.admit(hello);
    const admitted = await this.options.cap.admit(identity.meshId, identity.sessionId);
    metrics.capAdmissions.inc({ outcome: admitted ? 'admitted' : 'refused' });
    if (!admitted) throw new HelloRejected(CloseCode.meshAtCapacity, 'mesh at capacity');
    if (!connection.isOpen) {
      if (!this.options.connections.session(identity.sessionId)) {
        await this.options.cap.release(identity.meshId, identity.sessionId);
      }
      return;
    }
    connection.identity = identity;
    // In the mesh's fan-out from connections.add on, but its peer sees the welcome first.
    connection.holdUntilWelcome();
    // The feed exists before delivery can see the socket: wake-ups until it starts (after `welcome` and the
    // session hooks) fold into its first read, the backlog replay.
    connection.feed = this.options.openFeed(connection, identity.memberId);
    const previous = connections.session(identity.sessionId);
    connections.add(connection);
    // Same member, same session: the newer connection wins (admission refused any other member).
    previous?.close(CloseCode.sessionReplaced, 'session replaced by a newer connection');
    metrics.connections.inc({ mesh: identity.meshId });
    const { reattached, revoked } = await presence.attach(identity);
    if (revoked) {
      // Revoked between the admission's member check and now (the socket is registered, so a revocation
      // committed after this read finds it): refused as at the hello, before any welcome.
      connection.revoke();
      await presence.leave(identity);
      throw new HelloRejected(CloseCode.memberRevoked, 'member revoked');
    }
    metrics.hellosAccepted.inc({ resumed: String(reattached) });
    // The session's work starts before its welcome: a resumed session has its mesh channel and its stream
    // subscriptions back before its peer can know it is welcome (a publish in between was lost).
    connection.welcomed = true;
    try {
      // Labelled apart: what the rows do at every session's start (the mesh clock's election, stream
      // subscriptions), not the hello's admission.
      await asOperation('session', () => this.options.onSessionStart(connection));
    } catch (error) {
      connection.log.error({ err: error, connection: connection.id }, 'starting the session failed');
      connection.close(CloseCode.internal, 'internal error, retry');
      return;
    }
    connection.sendWelcome({
      type: 'welcome',
      v: 1,
      meshId: identity.meshId,
      sessionId: identity.sessionId,
      node: nodeId,
      resumed: reattached,
      heartbeatMs,
      ...(hello.rid === undefined ? {} : { rid: hello.rid }),
    } satisfies Welcome);
    // The feed's first read (the backlog) comes after the welcome: no durable frame before it. Counted
    // apart from the hello's own round trips: it is a read of the member's messages, paged.
    await asOperation('backlog', () => connection.feed!.start());
  }

  private async onClose(connection: Connection): Promise<void> {
    const { connections, presence, metrics, log } = this.options;
    const identity = connection.identity;
    const wasCurrent = connections.remove(connection);
    connection.feed?.close();
    if (!identity) return;
    metrics.connections.dec({ mesh: identity.meshId });
    if (connection.welcomed) this.options.onConnectionGone(identity);
    if (!wasCurrent || this.draining) return; // replaced by a newer socket, or the node is shutting down
    // The session may come back on a new socket here while this one is being cleaned up: each step
    // first checks that the session still has no socket, so the new one is never marked gone.
    const returned = () => connections.session(identity.sessionId) !== undefined;
    if (returned()) return;
    await this.options.cap.release(identity.meshId, identity.sessionId);
    if (returned()) return;
    await presence.detach(identity).catch((error) => log.error({ err: error }, 'presence detach failed'));
    if (returned()) return;
    await this.options
      .onSocketClosed(identity)
      .catch((error) => log.error({ err: error }, 'socket close hook failed'));
  }
}

/** A reply as sent, with its `rid`; one past MAX_REPLY_BYTES is refused rather than buffered for the peer. */
export function serializeReply(reply: ReplyFrame, rid: string | undefined): string {
  const text = JSON.stringify(rid === undefined ? reply : { ...reply, rid });
  if (text.length > MAX_REPLY_BYTES)
    throw new ProtocolError('too_large', `the reply would exceed ${MAX_REPLY_BYTES} bytes; ask for less`);
  return text;
}

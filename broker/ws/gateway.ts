/**
 * The WebSocket gateway: one socket's life on this node. It admits the hello, then reads frames one at a
 * time (so a sender's frames are handled in the order sent), hands each to the router, and turns errors
 * into `error` frames or close codes. It knows no feature: features register on the router.
 */
import type { FastifyRequest } from 'fastify';
import type { RawData, WebSocket } from 'ws';
import { CloseCode, ProtocolError } from '../../protocol/errors.js';
import type { ErrorFrame, ReplyFrame, Welcome } from '../../protocol/frames.js';
import { parseJsonObject, parseWith, ridOf } from '../../protocol/parse.js';
import { helloFrame } from '../../protocol/requests.js';
import type { SessionIdentity } from '../connections/connection.js';
import { Connection } from '../connections/connection.js';
import type { ConnectionRegistry } from '../connections/registry.js';
import { isDatabaseUnreachable } from '../db/errors.js';
import type { SessionFeed } from '../delivery/feed.js';
import type { HelloAdmission } from '../hello/admission.js';
import { HelloRejected } from '../hello/admission.js';
import type { ConnectionCap } from '../limits/connection-cap.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';
import type { Presence } from '../presence/presence.js';
import type { Router } from './router.js';

/** A socket that has not said hello by then is closed. */
const HELLO_TIMEOUT_MS = 10_000;
/** A socket that sends this many bad frames within a minute is abusing the protocol and is closed (4400). */
const ERROR_BUDGET_PER_MINUTE = 100;

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
  private readonly liveness: NodeJS.Timeout;
  /** Each socket's frame queue, while it has one: what a drain waits for. */
  private readonly queues = new Map<Connection, Promise<void>>();
  /** Each socket's replies still to send, in request order (pipelined requests answer later). */
  private readonly replies = new Map<Connection, Promise<void>>();

  constructor(private readonly options: GatewayOptions) {
    // A peer whose network died says nothing; a WebSocket ping it cannot answer within one interval
    // ends its socket, so its presence enters the grace period instead of lingering forever.
    this.liveness = setInterval(() => this.checkLiveness(), options.heartbeatMs);
    this.liveness.unref();
  }

  accept(socket: WebSocket, request: FastifyRequest): void {
    const { connections, log } = this.options;
    if (this.draining) {
      socket.close(CloseCode.draining, 'node draining');
      return;
    }
    const connection = new Connection(socket, log.child({ remote: request.ip }));
    connections.addPending(connection);
    const helloTimer = setTimeout(() => {
      if (!connection.identity) connection.close(CloseCode.helloRejected, 'no hello in time');
    }, HELLO_TIMEOUT_MS);
    helloTimer.unref();

    let queue = Promise.resolve();
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

    socket.on('message', (data: RawData, isBinary: boolean) => {
      // One frame at a time per socket: keeps per-sender order and bounds a socket's concurrency to one.
      queue = queue.then(() => this.onFrame(connection, data, isBinary, countError));
      this.queues.set(connection, queue);
    });
    socket.on('close', () => {
      clearTimeout(helloTimer);
      queue = queue
        .then(() => this.onClose(connection))
        .finally(() => {
          this.queues.delete(connection);
          this.replies.delete(connection);
        });
      this.queues.set(connection, queue);
    });
    socket.on('pong', () => {
      connection.alive = true;
    });
    socket.on('error', (error) => log.debug({ err: error, connection: connection.id }, 'socket error'));
  }

  /**
   * Drain: refuse new sockets, tell every peer to reconnect elsewhere (1001), and wait for the frames
   * already being handled (a `send` being committed) for at most `timeoutMs` (DRAIN_TIMEOUT_MS).
   */
  async drain(timeoutMs: number): Promise<void> {
    this.draining = true;
    clearInterval(this.liveness);
    for (const connection of this.options.connections.all())
      connection.close(CloseCode.draining, 'node draining');
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), timeoutMs);
    });
    const settled = Promise.allSettled([...this.queues.values(), ...this.replies.values()]).then(
      () => 'done' as const,
    );
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
    let rid: string | undefined;
    try {
      if (isBinary) throw new ProtocolError('bad_request', 'binary frames are not part of the protocol');
      const frame = parseJsonObject(data.toString());
      rid = ridOf(frame);
      if (typeof frame.type !== 'string') throw new ProtocolError('bad_request', 'missing field "type"');
      if (!connection.identity) {
        if (frame.type !== 'hello') throw new ProtocolError('no_hello', 'the first frame must be a hello');
        await this.hello(connection, frame);
        return;
      }
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
      .then(
        (reply) => {
          if (reply) connection.send(rid === undefined ? reply : { ...reply, rid });
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
    }
    const code = error instanceof ProtocolError ? error.code : unreachable ? 'unavailable' : 'internal';
    const message =
      error instanceof ProtocolError
        ? error.message
        : unreachable
          ? 'the database is unreachable; retry (a send retried with the same id is stored once)'
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
    // The feed exists before delivery can see the socket: wake-ups until it starts (after `welcome` and the
    // session hooks) fold into its first read, the backlog replay.
    connection.feed = this.options.openFeed(connection, identity.memberId);
    const previous = connections.session(identity.sessionId);
    connections.add(connection);
    // Same member, same session: the newer connection wins (admission refused any other member).
    previous?.close(CloseCode.sessionReplaced, 'session replaced by a newer connection');
    metrics.connections.inc({ mesh: identity.meshId });
    const { reattached } = await presence.attach(identity);
    metrics.hellosAccepted.inc({ resumed: String(reattached) });
    // The session's work starts before its welcome: a resumed session has its mesh channel and its stream
    // subscriptions back before its peer can know it is welcome (a publish in between was lost).
    connection.welcomed = true;
    try {
      await this.options.onSessionStart(connection);
    } catch (error) {
      connection.log.error({ err: error, connection: connection.id }, 'starting the session failed');
      connection.close(CloseCode.internal, 'internal error, retry');
      return;
    }
    connection.send({
      type: 'welcome',
      v: 1,
      meshId: identity.meshId,
      sessionId: identity.sessionId,
      node: nodeId,
      resumed: reattached,
      heartbeatMs,
      ...(hello.rid === undefined ? {} : { rid: hello.rid }),
    } satisfies Welcome);
    // The feed's first read (the backlog) comes after the welcome: no durable frame before it.
    await connection.feed.start();
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

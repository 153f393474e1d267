/**
 * The router's contract, as the broker's feature rows see it: a row registers each request frame it
 * serves with its schema (requests.ts) and a handler that answers with a reply frame (frames.ts). The
 * broker's gateway implements it (broker/ws/router.ts); rows depend on this contract, not on the gateway.
 */
import type { z } from 'zod';
import type { ReplyFrame } from './frames.js';

/** Who is on the other end of a socket, known once its hello was accepted. */
export interface SessionIdentity {
  meshId: string;
  /** The member's id in the broker's directory (never on the wire; the pubkey is). */
  memberId: number;
  pubkey: string;
  sessionId: string;
  name: string | null;
  groups: string[];
}

export interface RequestContext {
  identity: SessionIdentity;
  /** The request's `rid`, for handlers that answer later (the gateway adds it to returned replies). */
  rid: string | undefined;
}

/** A handler returns its reply frame (the gateway adds `rid`), or nothing when the request has no reply. */
export type RequestHandler<T> = (frame: T, context: RequestContext) => Promise<ReplyFrame | undefined>;

/**
 * A pipelined handler works in two steps: the first (awaited before the socket's next frame is read)
 * checks the request and submits its work in order, the second (`later`) is the work's outcome. The next
 * frame of the socket does not wait for `later`, so one socket's sends can share a commit; replies still
 * go out in the order of the requests, and a non-pipelined request waits for every earlier reply first.
 */
export type PipelinedHandler<T> = (
  frame: T,
  context: RequestContext,
) => Promise<{ later: Promise<ReplyFrame | undefined> }>;

/**
 * Request frames of an accepted session, by `type`. A frame that fails `schema` is answered with
 * `bad_request` naming the field, and an unregistered type with `unknown_type`, the same way for every row.
 */
export interface FrameRoutes {
  /** Registers the handler of one frame type (once per type). */
  on<S extends z.ZodType>(type: string, schema: S, handler: RequestHandler<z.infer<S>>): void;
  /** Registers a pipelined handler (see PipelinedHandler): only for requests whose order is their submission. */
  pipelined<S extends z.ZodType>(type: string, schema: S, handler: PipelinedHandler<z.infer<S>>): void;
}

import type { z } from 'zod';
import type { Connection, SessionIdentity } from '../connections/connection.js';
import { parseWith } from '../protocol/frames.js';

export interface RequestContext {
  connection: Connection;
  identity: SessionIdentity;
  /** The request's `rid`, for handlers that answer later (the gateway adds it to returned replies). */
  rid: string | undefined;
}

/** A handler returns its reply frame (the gateway adds `rid`), or nothing when the request has no reply. */
export type RequestHandler<T> = (frame: T, context: RequestContext) => Promise<object | undefined>;

interface Route {
  schema: z.ZodType;
  handler: RequestHandler<never>;
}

/**
 * Request frames of an accepted session, by `type`. Each feature module registers its frames with their
 * schema; the gateway parses nothing itself, so an unknown type or a bad field is answered the same way
 * everywhere.
 */
export class Router {
  private readonly routes = new Map<string, Route>();

  on<S extends z.ZodType>(type: string, schema: S, handler: RequestHandler<z.infer<S>>): void {
    if (this.routes.has(type)) throw new Error(`frame type ${type} registered twice`);
    this.routes.set(type, { schema, handler: handler as RequestHandler<never> });
  }

  has(type: string): boolean {
    return this.routes.has(type);
  }

  /** Validates and runs the frame's handler; throws ProtocolError for bad input. */
  async handle(type: string, frame: unknown, context: RequestContext): Promise<object | undefined> {
    const route = this.routes.get(type)!;
    return route.handler(parseWith(route.schema, frame) as never, context);
  }
}

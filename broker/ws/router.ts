import type { z } from 'zod';
import type { ReplyFrame } from '../../protocol/frames.js';
import { parseWith } from '../../protocol/parse.js';
import type { FrameRoutes, PipelinedHandler, RequestContext, RequestHandler } from '../../protocol/routes.js';

type Route =
  | { pipelined: false; schema: z.ZodType; handler: RequestHandler<never> }
  | { pipelined: true; schema: z.ZodType; handler: PipelinedHandler<never> };

/** What handling a frame gives the gateway: its reply now, or (pipelined) a reply to come. */
export type Handled = { now: ReplyFrame | undefined } | { later: Promise<ReplyFrame | undefined> };

/**
 * Request frames of an accepted session, by `type` (the contract rows register on: protocol/routes.ts).
 * Each feature module registers its frames with their schema; the gateway parses nothing itself, so an
 * unknown type or a bad field is answered the same way everywhere.
 */
export class Router implements FrameRoutes {
  private readonly routes = new Map<string, Route>();

  on<S extends z.ZodType>(type: string, schema: S, handler: RequestHandler<z.infer<S>>): void {
    if (this.routes.has(type)) throw new Error(`frame type ${type} registered twice`);
    this.routes.set(type, { pipelined: false, schema, handler: handler as RequestHandler<never> });
  }

  pipelined<S extends z.ZodType>(type: string, schema: S, handler: PipelinedHandler<z.infer<S>>): void {
    if (this.routes.has(type)) throw new Error(`frame type ${type} registered twice`);
    this.routes.set(type, { pipelined: true, schema, handler: handler as PipelinedHandler<never> });
  }

  /** Whether the type's handler is pipelined (its reply may come after the next frame is read). */
  isPipelined(type: string): boolean {
    return this.routes.get(type)?.pipelined === true;
  }

  has(type: string): boolean {
    return this.routes.has(type);
  }

  /** Validates and runs the frame's handler (its first step, if pipelined); throws ProtocolError for bad input. */
  async handle(type: string, frame: unknown, context: RequestContext): Promise<Handled> {
    const route = this.routes.get(type)!;
    const parsed = parseWith(route.schema, frame) as never;
    if (route.pipelined) return route.handler(parsed, context);
    return { now: await route.handler(parsed, context) };
  }
}

import type { z } from 'zod';
import type { ReplyFrame } from '../../protocol/frames.js';
import { parseWith } from '../../protocol/parse.js';
import type { FrameRoutes, RequestContext, RequestHandler } from '../../protocol/routes.js';

interface Route {
  schema: z.ZodType;
  handler: RequestHandler<never>;
}

/**
 * Request frames of an accepted session, by `type` (the contract rows register on: protocol/routes.ts).
 * Each feature module registers its frames with their schema; the gateway parses nothing itself, so an
 * unknown type or a bad field is answered the same way everywhere.
 */
export class Router implements FrameRoutes {
  private readonly routes = new Map<string, Route>();

  on<S extends z.ZodType>(type: string, schema: S, handler: RequestHandler<z.infer<S>>): void {
    if (this.routes.has(type)) throw new Error(`frame type ${type} registered twice`);
    this.routes.set(type, { schema, handler: handler as RequestHandler<never> });
  }

  has(type: string): boolean {
    return this.routes.has(type);
  }

  /** Validates and runs the frame's handler; throws ProtocolError for bad input. */
  async handle(type: string, frame: unknown, context: RequestContext): Promise<ReplyFrame | undefined> {
    const route = this.routes.get(type)!;
    return route.handler(parseWith(route.schema, frame) as never, context);
  }
}

/**
 * The one path a message takes into the mesh, whoever sends it: a peer's `send` (messaging.ts), a
 * schedule's occurrence (schedules/fire.ts) or a watch's notification (watches/notify.ts).
 * 1. take a point from the sender's send bucket: kind `send`, key `<mesh>:<pubkey>`, so a member's sends,
 *    occurrences and notifications share one quota (cluster-wide when the rate-limit row is shared);
 * 2. accept the message durably (MessageStore.accept: the group commit, or the caller's transaction);
 * 3. dispatch it: wake the recipients' feeds, without waiting; an idempotent retry wakes nobody.
 *
 * The callers differ only in their `origin` (the `rate_limited` series a refusal counts in, and whether
 * the accept counts as a peer's `sent`) and in what they make of a refusal: a peer gets an error frame, a
 * schedule skips the occurrence, a watch holds its notification. `sendMessage` runs the three steps; a
 * caller that accepts inside its own transaction (the shared scheduler) runs them one by one and
 * dispatches only after its commit.
 */
import { ProtocolError } from '../../protocol/errors.js';
import type { PoolClient } from '../db/pool.js';
import type { BrokerMetrics } from '../metrics.js';
import type { RateLimits } from '../rate-limits/rate-limits.js';
import type { Delivery } from './delivery.js';
import type { AcceptedMessage, MessageStore, NewMessage, Sender } from './store.js';

/** Who sends: the label of `mesh_broker_rate_limited_total` a refusal counts under. */
export type SendOrigin = 'send' | 'schedule' | 'watch';

export interface SendPathDeps {
  messages: MessageStore;
  delivery: Delivery;
  limits: RateLimits;
  metrics: BrokerMetrics;
}

export interface SendRequest {
  origin: SendOrigin;
  sender: Sender;
  message: NewMessage;
}

/**
 * Refused by the send limit (nothing was stored), or on its way: `accepted` resolves once the message is
 * committed and dispatched, and rejects with the store's refusal (a ProtocolError: not_found, forbidden,
 * limit_exceeded for a full backlog, …) or a failure.
 */
export type SendAttempt =
  | { limited: true; retryAfterMs: number }
  | { limited: false; accepted: Promise<AcceptedMessage> };

/** Step 1. Undefined when allowed; a refusal is counted under the origin's `rate_limited` series. */
export async function takeSendToken(
  deps: SendPathDeps,
  origin: SendOrigin,
  sender: Sender,
): Promise<{ retryAfterMs: number } | undefined> {
  const decision = await deps.limits.consume('send', `${sender.meshId}:${sender.pubkey}`);
  if (decision.allowed) return undefined;
  deps.metrics.rateLimited.inc({ kind: origin });
  return { retryAfterMs: decision.retryAfterMs };
}

/**
 * Step 2. `db`: the caller's own transaction. Only a peer's `send` counts in `messages_accepted` (its
 * help: "a `sent` reply") and `backlog_refused`, as before the three paths were one.
 */
export function acceptMessage(
  deps: SendPathDeps,
  { origin, sender, message }: SendRequest,
  db?: PoolClient,
): Promise<AcceptedMessage> {
  const accepting = deps.messages.accept(sender, message, db);
  if (origin !== 'send') return accepting;
  const { metrics } = deps;
  return accepting.then(
    (accepted) => {
      if (!accepted.duplicate) {
        metrics.messagesAccepted.inc();
        if (accepted.dropped > 0) metrics.backlogRefused.inc({ kind: 'broadcast' }, accepted.dropped);
      }
      return accepted;
    },
    (error: unknown) => {
      if (error instanceof ProtocolError && error.code === 'limit_exceeded')
        metrics.backlogRefused.inc({ kind: 'dm' });
      throw error;
    },
  );
}

/** Step 3: once the message's rows are committed. A duplicate was dispatched when first accepted. */
export function dispatchAccepted(deps: SendPathDeps, accepted: AcceptedMessage, meshId: string): void {
  if (!accepted.duplicate) deps.delivery.dispatch(meshId, accepted);
}

/**
 * Steps 1 to 3. The accept is submitted before this resolves, so a pipelined caller's messages enter the
 * group commit in its order; the dispatch runs before `accepted` resolves, so what a caller does with it
 * (its audit, its reply) follows the dispatch.
 */
export async function sendMessage(deps: SendPathDeps, request: SendRequest): Promise<SendAttempt> {
  const limited = await takeSendToken(deps, request.origin, request.sender);
  if (limited) return { limited: true, ...limited };
  const accepted = acceptMessage(deps, request).then((message) => {
    dispatchAccepted(deps, message, request.sender.meshId);
    return message;
  });
  return { limited: false, accepted };
}

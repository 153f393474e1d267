import { randomUUID } from 'node:crypto';
import { ProtocolError } from '../../protocol/errors.js';
import type { AuditLog } from '../audit/audit.js';
import type { Delivery } from '../delivery/delivery.js';
import type { AcceptedMessage, MessageStore, NewMessage, Sender } from '../delivery/store.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';
import type { RateLimits } from '../rate-limits/rate-limits.js';
import type { FireOccurrence } from './scheduler.js';
import type { Schedule } from './store.js';

export interface FireOptions {
  messages: MessageStore;
  delivery: Delivery;
  audit: AuditLog;
  /** The send limit: every occurrence takes a point from its creator's bucket, as a `send` would. */
  limits: RateLimits;
  metrics: BrokerMetrics;
  log: Logger;
}

/** Why an occurrence was not delivered: the send limit was spent, or the message was refused. */
export interface SkipReason {
  reason: 'rate_limited' | ProtocolError['code'];
  message: string;
}

/** An occurrence as a durable message from the schedule's creator (its session as `fromSession`). */
export function occurrenceMessage(
  schedule: Schedule,
  occurrence: number,
  id: string,
): { sender: Sender; message: NewMessage } {
  return {
    sender: {
      meshId: schedule.meshId,
      memberId: schedule.memberId,
      sessionId: schedule.sessionId,
      pubkey: schedule.creator,
    },
    message: { id, to: schedule.to, body: schedule.body, scheduleId: schedule.scheduleId, occurrence },
  };
}

/**
 * Takes the occurrence's point from the creator's send bucket (the key `send` uses, so sends and
 * occurrences share one quota, cluster-wide when the rate-limit row is shared). Undefined when allowed.
 */
export async function sendLimitSkip(
  options: FireOptions,
  schedule: Schedule,
): Promise<SkipReason | undefined> {
  const decision = await options.limits.consume('send', `${schedule.meshId}:${schedule.creator}`);
  if (decision.allowed) return undefined;
  options.metrics.rateLimited.inc({ kind: 'schedule' });
  return {
    reason: 'rate_limited',
    message: `the creator's send limit was spent (a point is back in ${decision.retryAfterMs} ms)`,
  };
}

/** A refusal of the occurrence's message that is final for it (recipient gone, creator revoked, …). */
export function refusalSkip(error: unknown): SkipReason | undefined {
  return error instanceof ProtocolError ? { reason: error.code, message: error.message } : undefined;
}

/** After an occurrence is stored: deliver it like any send, count it, audit it. */
export async function announceOccurrence(
  options: FireOptions,
  schedule: Schedule,
  occurrence: number,
  accepted: AcceptedMessage,
): Promise<void> {
  if (!accepted.duplicate) options.delivery.dispatch(schedule.meshId, accepted);
  options.metrics.scheduleFires.inc({ outcome: 'fired' });
  options.audit.record({
    meshId: schedule.meshId,
    eventType: 'schedule.fired',
    actor: schedule.creator,
    payload: { scheduleId: schedule.scheduleId, occurrence, messageId: accepted.frame.messageId },
  });
}

/**
 * An occurrence that delivers nothing: logged, counted and audited (`schedule.skipped` with its reason,
 * which the creator sees in `audit.query`); the schedule moves on to its next occurrence (a one-shot ends).
 */
export function announceSkip(
  options: FireOptions,
  schedule: Schedule,
  occurrence: number,
  skip: SkipReason,
): void {
  options.log.info(
    { scheduleId: schedule.scheduleId, occurrence, reason: skip.reason },
    'schedule occurrence skipped',
  );
  options.metrics.scheduleFires.inc({ outcome: 'skipped' });
  options.audit.record({
    meshId: schedule.meshId,
    eventType: 'schedule.skipped',
    actor: schedule.creator,
    payload: { scheduleId: schedule.scheduleId, occurrence, reason: skip.reason, message: skip.message },
  });
}

/**
 * The single-node fire: take the send point, store the occurrence's message, then announce it. The
 * message id is fresh per fire, as in the original broker: nothing stops two nodes firing the same
 * occurrence (the local gap).
 */
export function fireOccurrence(options: FireOptions): FireOccurrence {
  return async (schedule, occurrence) => {
    try {
      const limited = await sendLimitSkip(options, schedule);
      if (limited) return announceSkip(options, schedule, occurrence, limited);
      const { sender, message } = occurrenceMessage(
        schedule,
        occurrence,
        `schedule:${schedule.scheduleId}:${occurrence}:${randomUUID()}`,
      );
      let accepted: AcceptedMessage;
      try {
        accepted = await options.messages.accept(sender, message);
      } catch (error) {
        const refused = refusalSkip(error);
        if (!refused) throw error;
        return announceSkip(options, schedule, occurrence, refused);
      }
      await announceOccurrence(options, schedule, occurrence, accepted);
    } catch (error) {
      options.metrics.scheduleFires.inc({ outcome: 'failed' });
      options.log.error(
        { err: error, scheduleId: schedule.scheduleId, occurrence },
        'schedule occurrence failed',
      );
    }
  };
}

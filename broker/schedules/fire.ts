import { randomUUID } from 'node:crypto';
import { ProtocolError } from '../../protocol/errors.js';
import type { AuditLog } from '../audit/audit.js';
import { dispatchAccepted, type SendPathDeps, sendMessage, takeSendToken } from '../delivery/send-path.js';
import type { AcceptedMessage, NewMessage, Sender } from '../delivery/store.js';
import type { Logger } from '../log.js';
import type { FireOccurrence } from './scheduler.js';
import type { Schedule } from './store.js';

/** `limits`: the send limit; every occurrence takes a point from its creator's bucket, as a `send` would. */
export interface FireOptions extends SendPathDeps {
  audit: AuditLog;
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
    sender: occurrenceSender(schedule),
    message: { id, to: schedule.to, body: schedule.body, scheduleId: schedule.scheduleId, occurrence },
  };
}

/** The schedule's creator, from the session that created it. */
function occurrenceSender(schedule: Schedule): Sender {
  return {
    meshId: schedule.meshId,
    memberId: schedule.memberId,
    sessionId: schedule.sessionId,
    pubkey: schedule.creator,
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
  const limited = await takeSendToken(options, 'schedule', occurrenceSender(schedule));
  return limited && limitedSkip(limited.retryAfterMs);
}

function limitedSkip(retryAfterMs: number): SkipReason {
  return {
    reason: 'rate_limited',
    message: `the creator's send limit was spent (a point is back in ${retryAfterMs} ms)`,
  };
}

/** A refusal of the occurrence's message that is final for it (recipient gone, creator revoked, …). */
export function refusalSkip(error: unknown): SkipReason | undefined {
  return error instanceof ProtocolError ? { reason: error.code, message: error.message } : undefined;
}

/** After an occurrence is committed (in the shared scheduler's transaction): deliver it, count it, audit it. */
export async function announceOccurrence(
  options: FireOptions,
  schedule: Schedule,
  occurrence: number,
  accepted: AcceptedMessage,
): Promise<void> {
  dispatchAccepted(options, accepted, schedule.meshId);
  recordFired(options, schedule, occurrence, accepted);
}

/** A delivered occurrence, counted and audited (`schedule.fired`). */
function recordFired(
  options: FireOptions,
  schedule: Schedule,
  occurrence: number,
  accepted: AcceptedMessage,
): void {
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
 * The single-node fire: the occurrence's message takes the send path (send token, accept, dispatch),
 * then is counted and audited; a spent send limit or a refusal skips the occurrence. The
 * message id is fresh per fire, as in the original broker: nothing stops two nodes firing the same
 * occurrence (the local gap).
 */
export function fireOccurrence(options: FireOptions): FireOccurrence {
  return async (schedule, occurrence) => {
    try {
      const attempt = await sendMessage(options, {
        origin: 'schedule',
        ...occurrenceMessage(
          schedule,
          occurrence,
          `schedule:${schedule.scheduleId}:${occurrence}:${randomUUID()}`,
        ),
      });
      if (attempt.limited)
        return announceSkip(options, schedule, occurrence, limitedSkip(attempt.retryAfterMs));
      let accepted: AcceptedMessage;
      try {
        accepted = await attempt.accepted;
      } catch (error) {
        const refused = refusalSkip(error);
        if (!refused) throw error;
        return announceSkip(options, schedule, occurrence, refused);
      }
      recordFired(options, schedule, occurrence, accepted);
    } catch (error) {
      options.metrics.scheduleFires.inc({ outcome: 'failed' });
      options.log.error(
        { err: error, scheduleId: schedule.scheduleId, occurrence },
        'schedule occurrence failed',
      );
    }
  };
}

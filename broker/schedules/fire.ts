import { randomUUID } from 'node:crypto';
import type { AuditLog } from '../audit/audit.js';
import type { Delivery } from '../delivery/delivery.js';
import type { AcceptedMessage, MessageStore, NewMessage, Sender } from '../delivery/store.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';
import type { FireOccurrence } from './scheduler.js';
import type { Schedule } from './store.js';

export interface FireOptions {
  messages: MessageStore;
  delivery: Delivery;
  audit: AuditLog;
  metrics: BrokerMetrics;
  log: Logger;
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
 * The single-node fire: store the occurrence's message, then announce it. The message id is fresh per
 * fire, as in the original broker: nothing stops two nodes firing the same occurrence (the local gap).
 */
export function fireOccurrence(options: FireOptions): FireOccurrence {
  return async (schedule, occurrence) => {
    try {
      const { sender, message } = occurrenceMessage(
        schedule,
        occurrence,
        `schedule:${schedule.scheduleId}:${occurrence}:${randomUUID()}`,
      );
      await announceOccurrence(options, schedule, occurrence, await options.messages.accept(sender, message));
    } catch (error) {
      options.metrics.scheduleFires.inc({ outcome: 'failed' });
      options.log.error(
        { err: error, scheduleId: schedule.scheduleId, occurrence },
        'schedule occurrence failed',
      );
    }
  };
}

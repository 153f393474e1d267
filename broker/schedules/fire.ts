import { randomUUID } from 'node:crypto';
import type { AuditLog } from '../audit/audit.js';
import type { Delivery } from '../delivery/delivery.js';
import type { MessageStore } from '../delivery/store.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';
import type { FireOccurrence } from './scheduler.js';

export interface FireOptions {
  messages: MessageStore;
  delivery: Delivery;
  audit: AuditLog;
  metrics: BrokerMetrics;
  log: Logger;
}

/**
 * An occurrence as a durable message from the schedule's creator (its session as `fromSession`), then
 * delivered like any send. The message id is fresh per fire: exactly-once is the scheduler's job.
 */
export function fireOccurrence(options: FireOptions): FireOccurrence {
  return async (schedule, occurrence) => {
    try {
      const accepted = await options.messages.accept(
        {
          meshId: schedule.meshId,
          memberId: schedule.memberId,
          sessionId: schedule.sessionId,
          pubkey: schedule.creator,
        },
        {
          id: `schedule:${schedule.scheduleId}:${occurrence}:${randomUUID()}`,
          to: schedule.to,
          body: schedule.body,
          scheduleId: schedule.scheduleId,
          occurrence,
        },
      );
      await options.delivery.dispatch(schedule.meshId, accepted.frame, accepted.recipients);
      options.metrics.scheduleFires.inc({ outcome: 'fired' });
      options.audit.record({
        meshId: schedule.meshId,
        eventType: 'schedule.fired',
        actor: schedule.creator,
        payload: { scheduleId: schedule.scheduleId, occurrence, messageId: accepted.frame.messageId },
      });
    } catch (error) {
      options.metrics.scheduleFires.inc({ outcome: 'failed' });
      options.log.error(
        { err: error, scheduleId: schedule.scheduleId, occurrence },
        'schedule occurrence failed',
      );
    }
  };
}

import { ProtocolError } from '../../protocol/errors.js';
import type { ScheduleInfo } from '../../protocol/frames.js';
import { scheduleCancelFrame, scheduleCreateFrame, scheduleListFrame } from '../../protocol/requests.js';
import type { FrameRoutes } from '../../protocol/routes.js';
import type { AuditLog } from '../audit/audit.js';
import type { Directory } from '../identity/directory.js';
import type { ListReads } from '../regions/regions.js';
import { schedulePage } from './list-page.js';
import type { Scheduler } from './scheduler.js';
import type { Schedule, ScheduleStore } from './store.js';
import { cronProblem, nextCronRun } from './timing.js';

/** `at` may lag the node's clock by this much (a peer's clock skew) and still count as "now". */
const PAST_TOLERANCE_MS = 1000;

export interface ScheduleFramesOptions {
  store: ScheduleStore;
  /** Where `schedule.list` reads (the regions row); default the store's pool. */
  lists?: ListReads;
  scheduler: Scheduler;
  directory: Directory;
  audit: AuditLog;
  maxPerMember: number;
  maxBodyBytes: number;
}

function view(schedule: Schedule): ScheduleInfo {
  return {
    scheduleId: schedule.scheduleId,
    to: schedule.to,
    body: schedule.body,
    at: schedule.at?.getTime() ?? null,
    cron: schedule.cron,
    tz: schedule.tz,
    nextFireAt: schedule.nextFireAt?.getTime() ?? null,
    occurrences: schedule.occurrences,
    createdAt: schedule.createdAt.toISOString(),
  };
}

/** The schedule frames (docs/protocol.md § Scheduled messages). */
export function registerScheduleFrames(router: FrameRoutes, options: ScheduleFramesOptions): void {
  const { store, directory, audit } = options;

  router.on('schedule.create', scheduleCreateFrame, async (frame, { identity }) => {
    if ((frame.at === undefined) === (frame.cron === undefined)) {
      throw new ProtocolError('bad_request', 'give exactly one of "at" (ms since the epoch) or "cron"');
    }
    if (frame.tz !== undefined && frame.cron === undefined)
      throw new ProtocolError('bad_request', '"tz" goes with "cron"');
    if (Buffer.byteLength(frame.body, 'utf8') > options.maxBodyBytes) {
      throw new ProtocolError('too_large', `body is larger than ${options.maxBodyBytes} bytes`);
    }
    if (frame.to === identity.pubkey)
      throw new ProtocolError('bad_request', 'cannot schedule a message to yourself');
    if (frame.to !== '*' && !frame.to.startsWith('@')) {
      const member = await directory.findMember(identity.meshId, frame.to);
      if (!member || member.revokedAt)
        throw new ProtocolError('not_found', `no member ${frame.to} in this mesh`);
    }
    let nextFireAt: Date;
    const tz = frame.cron === undefined ? null : (frame.tz ?? 'UTC');
    if (frame.cron !== undefined) {
      const problem = cronProblem(frame.cron, tz!);
      if (problem) throw new ProtocolError('bad_request', `field "cron" ${problem}`);
      nextFireAt = nextCronRun(frame.cron, tz!, new Date())!;
    } else {
      if (frame.at! < Date.now() - PAST_TOLERANCE_MS)
        throw new ProtocolError('bad_request', 'field "at" is in the past');
      nextFireAt = new Date(frame.at!);
    }
    const schedule = await store.create(
      {
        meshId: identity.meshId,
        memberId: identity.memberId,
        sessionId: identity.sessionId,
        to: frame.to,
        body: frame.body,
        at: frame.at === undefined ? null : new Date(frame.at),
        cron: frame.cron?.trim() ?? null,
        tz,
        nextFireAt,
      },
      options.maxPerMember,
    );
    options.scheduler.created(schedule);
    audit.record({
      meshId: identity.meshId,
      eventType: 'schedule.created',
      actor: identity.pubkey,
      payload: {
        scheduleId: schedule.scheduleId,
        to: frame.to,
        at: frame.at,
        cron: schedule.cron ?? undefined,
        tz,
      },
    });
    return { type: 'schedule.created', scheduleId: schedule.scheduleId, nextFireAt: nextFireAt.getTime() };
  });

  router.on('schedule.cancel', scheduleCancelFrame, async (frame, { identity }) => {
    await store.cancel(identity.meshId, identity.memberId, frame.scheduleId);
    options.scheduler.cancelled(frame.scheduleId);
    audit.record({
      meshId: identity.meshId,
      eventType: 'schedule.cancelled',
      actor: identity.pubkey,
      payload: { scheduleId: frame.scheduleId },
    });
    return { type: 'schedule.cancelled', scheduleId: frame.scheduleId };
  });

  router.on('schedule.list', scheduleListFrame, async (frame, { identity }) => ({
    type: 'schedule.list_result',
    ...schedulePage(
      (await store.list(identity.meshId, identity.memberId, options.lists)).map(view),
      frame.cursor,
    ),
  }));
}

/**
 * Schedules: every occurrence fires exactly once. From `schedule-create` (ok: value scheduleId, once) and
 * `schedule-fire` (ok, by any session of the recipient: scheduleId, occurrence, messageId; one message
 * seen by several sessions is one firing):
 * - schedule-fired-twice: an occurrence with two message ids, or a one-off schedule with two occurrences;
 * - schedule-never-fired: a schedule created ok that never fired (the run drains until they are due).
 * A schedule whose creation was not confirmed may fire (it existed after all): judged for repeats only.
 */
import { type HistoryEvent, num, str } from '../history/format.js';
import type { Anomalies, Checker } from './anomalies.js';

interface Schedule {
  created?: number;
  once: boolean;
  /** Per occurrence: messageId → the first fire event's index. */
  fires: Map<number, Map<string, number>>;
}

export class ScheduleChecker implements Checker {
  readonly name = 'schedules';
  private readonly schedules = new Map<string, Schedule>();
  private fires = 0;

  private of(id: string): Schedule {
    let schedule = this.schedules.get(id);
    if (!schedule) {
      schedule = { once: false, fires: new Map() };
      this.schedules.set(id, schedule);
    }
    return schedule;
  }

  add(event: HistoryEvent, line: number): void {
    if (event.type !== 'ok') return;
    if (event.f === 'schedule-create') {
      const schedule = this.of(str(event, 'scheduleId', line));
      schedule.created = event.index;
      schedule.once = event.value.once === true;
    } else if (event.f === 'schedule-fire') {
      this.fires++;
      const schedule = this.of(str(event, 'scheduleId', line));
      const occurrence = num(event, 'occurrence', line);
      const ids = schedule.fires.get(occurrence) ?? new Map<string, number>();
      const messageId = str(event, 'messageId', line);
      if (!ids.has(messageId)) ids.set(messageId, event.index);
      schedule.fires.set(occurrence, ids);
    }
  }

  finish(anomalies: Anomalies): string {
    let created = 0;
    for (const [id, schedule] of this.schedules) {
      if (schedule.created !== undefined) created++;
      const created_ = schedule.created === undefined ? [] : [schedule.created];
      if (schedule.created !== undefined && schedule.fires.size === 0)
        anomalies.add('schedule-never-fired', `schedule ${id} was created and never fired`, created_);
      for (const [occurrence, ids] of schedule.fires)
        if (ids.size > 1)
          anomalies.add(
            'schedule-fired-twice',
            `schedule ${id} occurrence ${occurrence} fired as ${ids.size} messages (${[...ids.keys()].join(', ')})`,
            [...created_, ...ids.values()],
          );
      if (schedule.once && schedule.fires.size > 1)
        anomalies.add(
          'schedule-fired-twice',
          `one-off schedule ${id} fired occurrences ${[...schedule.fires.keys()].join(', ')}`,
          [...created_, ...[...schedule.fires.values()].map((ids) => [...ids.values()][0]!)],
        );
    }
    return `${this.schedules.size} schedules (${created} created ok), ${this.fires} fire events`;
  }
}

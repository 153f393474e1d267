/**
 * What the schedule checks share. Scheduled messages are watched by the recipient member with a session on
 * every node, so a message is seen wherever it is fired and whatever delivery does (a schedule check must
 * not fail for a delivery gap); a message fired twice has two message ids, a message delivered to several
 * sessions one.
 */
import type { MemberKeys, MeshClient } from '@mesh-broker/sdk';
import type { Frame } from '../../protocol/frames.js';
import { CheckFailed } from './check.js';
import type { SmokeContext, SmokeMesh } from './context.js';

export class ScheduleWitness {
  /** Per schedule id, the message ids of its occurrences seen by any session of the recipient. */
  private readonly fired = new Map<string, Set<string>>();

  private constructor(readonly pubkey: string) {}

  static async everywhere(
    context: SmokeContext,
    mesh: SmokeMesh,
    member: MemberKeys,
  ): Promise<ScheduleWitness> {
    const witness = new ScheduleWitness(member.pubkey);
    for (const node of context.target.nodes) {
      const peer = await context.peer(context.urlsFrom(node.url), mesh, member);
      peer.on('message', (message) => {
        if (typeof message.scheduleId !== 'string') return;
        const ids = witness.fired.get(message.scheduleId) ?? new Set<string>();
        ids.add(message.messageId);
        witness.fired.set(message.scheduleId, ids);
      });
    }
    return witness;
  }

  has(scheduleId: string): boolean {
    return this.fired.has(scheduleId);
  }

  /** Every schedule fired exactly once, or a CheckFailed naming the first that did not. */
  exactlyOnce(scheduleIds: string[], when: string): void {
    for (const id of scheduleIds) {
      const times = this.fired.get(id)?.size ?? 0;
      if (times !== 1) throw new CheckFailed(`schedule ${id.slice(0, 8)} fired ${times} times ${when}`);
    }
  }
}

/** Creates a one-off schedule due in `inMs`, to `to`; resolves to its id. */
export async function scheduleIn(peer: MeshClient, to: string, inMs: number): Promise<string> {
  const created = await peer.request<Frame & { scheduleId: string }>({
    type: 'schedule.create',
    to,
    body: 'smoke',
    at: Date.now() + inMs,
  });
  return created.scheduleId;
}

/** After the last expected occurrence, how long a check keeps listening for a duplicate. */
export const SETTLE_MS = 1500;

/**
 * A revoked member's sessions, ended on every node (issue 30 item 5: revocation as a state):
 * - the admin call ends them here, tells every node of the mesh over the bus, and waits (bounded) for
 *   each node that Postgres's presence shows holding one of the member's sessions to say how many it
 *   closed: its answer is the call's report (`SessionsClosed`);
 * - a node that hears `member.revoked` confirms it against Postgres, ends the member's sessions and
 *   answers the revoking node;
 * - each node re-reads revocations from Postgres (identity/revocation-watch.ts) every
 *   `REVOCATION_RECHECK_MS` and after a bus reconnect, so a lost message still closes every socket
 *   within that period: a node that did not answer in time is listed `unconfirmed`, and closes anyway.
 */
import type { Bus } from '../bus/bus.js';
import type { Pool } from '../db/pool.js';
import type { Directory, Member } from '../identity/directory.js';
import { RevocationWatch } from '../identity/revocation-watch.js';
import type { Logger } from '../log.js';
import { PeriodicTask } from '../timing/periodic.js';

/** How long the admin call waits for the other nodes' answers. */
export const REPORT_WAIT_MS = 1000;

/** What an admin revocation closed: sessions per node that closed any, and the nodes that did not answer. */
export interface SessionsClosed {
  total: number;
  nodes: Array<{ node: string; sessions: number }>;
  /** Nodes that held a session of the member (presence) and did not answer within REPORT_WAIT_MS. */
  unconfirmed: string[];
}

export interface RevocationsOptions {
  nodeId: string;
  bus: Bus;
  pool: Pool;
  directory: Directory;
  log: Logger;
  recheckMs: number;
  hasLocalSessions: (memberId: number) => boolean;
  /** Ends the member's sessions on this node; how many sockets it closed. */
  endMemberSessions: (memberId: number) => Promise<number>;
}

export interface Revocations {
  /** The admin call's part: end the member's sessions everywhere, and say what was closed where. */
  revokeEverywhere(member: Member): Promise<SessionsClosed>;
  start(): void;
  stop(): Promise<void>;
}

/** The nodes other than `self` with a connected session of the member, as presence says. */
async function holdingNodes(pool: Pool, memberId: number, self: string): Promise<Set<string>> {
  const result = await pool.query<{ node: string }>(
    `SELECT DISTINCT node_id AS node FROM presence
      WHERE member_id = $1 AND disconnected_at IS NULL AND node_id <> $2`,
    [memberId, self],
  );
  return new Set(result.rows.map((row) => row.node));
}

export function createRevocations(options: RevocationsOptions): Revocations {
  const { nodeId, bus, directory, log } = options;
  /** Admin calls of this node waiting for answers, by member id. */
  const waiting = new Map<number, Set<(node: string, closed: number) => void>>();

  bus.on('member.revoked.closed', (scope, { memberId, node, closed }) => {
    if (scope !== nodeId) return;
    for (const hear of waiting.get(memberId) ?? []) hear(node, closed);
  });
  // Over the bus a revocation is a hint: its sessions end only once Postgres shows the member of that mesh
  // revoked (the admin API wrote it before publishing), so a forged or misdirected one closes nothing.
  bus.on('member.revoked', (meshId, { memberId, reportTo }) => {
    void (async () => {
      if (!(await directory.isRevoked(meshId, memberId))) {
        log.warn(
          { meshId, memberId },
          'member.revoked over the bus for a member Postgres does not show revoked: ignored',
        );
        return;
      }
      const closed = await options.endMemberSessions(memberId);
      if (reportTo !== undefined)
        await bus.publishToNode(reportTo, 'member.revoked.closed', { memberId, node: nodeId, closed });
    })().catch((error) => log.warn({ err: error }, 'ending revoked sessions failed'));
  });

  const watch = new RevocationWatch({
    directory,
    hasLocalSessions: options.hasLocalSessions,
    endMemberSessions: options.endMemberSessions,
  });
  const task = new PeriodicTask({
    everyMs: options.recheckMs,
    cadence: 'after-run',
    run: async () => {
      const ended = await watch.round();
      if (ended > 0) log.info({ members: ended }, 'revocations re-read from Postgres closed sessions here');
    },
    onError: { log, message: 're-reading revocations failed; the next round retries' },
  });
  // Whatever was published while the subscriber was away is lost: read revocations now.
  bus.onReconnect(() => void task.runNow());

  const revokeEverywhere = async (member: Member): Promise<SessionsClosed> => {
    const expected = await holdingNodes(options.pool, member.id, nodeId);
    const counts = new Map<string, number>([[nodeId, await options.endMemberSessions(member.id)]]);
    let allHeard = () => {};
    const heard = new Promise<void>((resolve) => {
      allHeard = resolve;
    });
    const hear = (node: string, closed: number) => {
      counts.set(node, (counts.get(node) ?? 0) + closed);
      expected.delete(node);
      if (expected.size === 0) allHeard();
    };
    const listeners = waiting.get(member.id) ?? new Set();
    waiting.set(member.id, listeners.add(hear));
    try {
      await bus.publishToMesh(member.meshId, 'member.revoked', { memberId: member.id, reportTo: nodeId });
      if (expected.size > 0) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([heard, new Promise((resolve) => (timer = setTimeout(resolve, REPORT_WAIT_MS)))]);
        clearTimeout(timer);
      }
    } finally {
      listeners.delete(hear);
      if (listeners.size === 0) waiting.delete(member.id);
    }
    const nodes = [...counts]
      .filter(([, sessions]) => sessions > 0)
      .map(([node, sessions]) => ({ node, sessions }))
      .sort((a, b) => a.node.localeCompare(b.node));
    return {
      total: nodes.reduce((sum, n) => sum + n.sessions, 0),
      nodes,
      unconfirmed: [...expected].sort(),
    };
  };

  return {
    revokeEverywhere,
    start: () => task.start(),
    stop: () => task.stop(),
  };
}

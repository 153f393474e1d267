/**
 * Accepting messages: one transaction stores a batch of messages and their delivery rows, each row with
 * the recipient member's next `seq` (docs/delivery.md). Every transaction that writes a member's delivery
 * rows first locks that member's `delivery_feeds` row (all of them at once, in member order, so two
 * batches never deadlock), so the seqs of one member are assigned and committed in order, without gaps.
 *
 * Per message, in arrival order:
 * - a retried `id` of the same sender is the original message again (`duplicate`), nothing new stored;
 * - a revoked sender is `forbidden`; an unknown DM recipient `not_found`; a DM to oneself `bad_request`;
 * - a recipient whose backlog is full (BACKLOG_MAX unacked): a DM is refused with `limit_exceeded`, a
 *   broadcast or group message skips that member (counted);
 * - otherwise the message, its rows and the recipients' new seqs; and, for a DM or group message, the
 *   nodes that hold a session of a recipient (presence), so that only they are woken.
 */
import { ProtocolError } from '../../protocol/errors.js';
import type { DurableFrame } from '../connections/connection.js';
import type { PoolClient } from '../db/pool.js';
import type { Outcome } from './group-commit.js';
import { type AcceptedMessage, type NewMessage, originalMessage, type Sender, toFrame } from './rows.js';

export interface AcceptRequest {
  sender: Sender;
  message: NewMessage;
}

export interface AcceptPolicy {
  /** Unacked messages a member may be owed; past it, see above. */
  backlogMax: number;
}

interface MemberRow {
  id: number;
  meshId: string;
  pubkey: string;
  groups: string[];
  /** The nodes holding a connected session of the member. */
  nodes: string[];
  revoked: boolean;
}

/** Where one request stands while the batch is worked out. */
interface Plan {
  request: AcceptRequest;
  key: string;
  outcome?: Outcome<AcceptedMessage>;
  recipients: number[];
  dropped: number;
  messageId?: number;
  createdAt?: Date;
  /** The same message earlier in this batch (a retry that arrived before its original committed). */
  sameAs?: Plan;
}

const keyOf = (meshId: string, senderId: number, clientId: string) =>
  `${meshId}\u0000${senderId}\u0000${clientId}`;
const refused = (error: unknown): Outcome<AcceptedMessage> => ({ ok: false, error });

export async function acceptBatch(
  client: PoolClient,
  requests: AcceptRequest[],
  policy: AcceptPolicy,
): Promise<Array<Outcome<AcceptedMessage>>> {
  const plans: Plan[] = requests.map((request) => ({
    request,
    key: keyOf(request.sender.meshId, request.sender.memberId, request.message.id),
    recipients: [],
    dropped: 0,
  }));

  // 1. In one statement: retries of messages accepted before, the senders (revoked or not), and the
  // recipients (every member of the meshes of broadcasts and group messages, the named ones of DMs), each
  // with the nodes holding a session of it (presence: who to wake).
  const many = plans.filter((p) => isMany(p.request.message.to));
  const named = plans.filter((p) => !isMany(p.request.message.to));
  const found = await client.query<MemberRow & { kind: 'dup' | 'member'; clientId: string | null }>(
    `SELECT 'dup' AS kind, m.sender_id AS id, m.mesh_id AS "meshId", NULL AS pubkey, m.client_id AS "clientId",
            NULL::text[] AS groups, NULL::text[] AS nodes, false AS revoked
       FROM messages m
       JOIN unnest($1::uuid[], $2::bigint[], $3::text[]) AS u(mesh_id, sender_id, client_id)
         ON m.mesh_id = u.mesh_id AND m.sender_id = u.sender_id AND m.client_id = u.client_id
     UNION ALL
     SELECT 'member', r.id, r.mesh_id, r.pubkey, NULL, r.groups,
            ARRAY(SELECT DISTINCT p.node_id FROM presence p WHERE p.member_id = r.id AND p.disconnected_at IS NULL),
            r.revoked_at IS NOT NULL
       FROM members r
      WHERE r.id = ANY ($2::bigint[])
         OR (r.revoked_at IS NULL AND (r.mesh_id = ANY ($4::uuid[])
             OR (r.mesh_id, r.pubkey) IN (SELECT * FROM unnest($5::uuid[], $6::text[]))))`,
    [
      plans.map((p) => p.request.sender.meshId),
      plans.map((p) => p.request.sender.memberId),
      plans.map((p) => p.request.message.id),
      [...new Set(many.map((p) => p.request.sender.meshId))],
      named.map((p) => p.request.sender.meshId),
      named.map((p) => p.request.message.to),
    ],
  );
  const duplicates = new Set<string>();
  const revokedIds = new Set<number>();
  const byMesh = new Map<string, MemberRow[]>();
  const nodesOf = new Map<number, string[]>();
  for (const row of found.rows) {
    if (row.kind === 'dup') {
      duplicates.add(keyOf(row.meshId, row.id, row.clientId!));
      continue;
    }
    if (row.revoked) {
      revokedIds.add(row.id);
      continue;
    }
    nodesOf.set(row.id, row.nodes);
    const mesh = byMesh.get(row.meshId) ?? [];
    if (!mesh.some((m) => m.id === row.id)) mesh.push(row);
    byMesh.set(row.meshId, mesh);
  }
  const first = new Map<string, Plan>();
  for (const plan of plans) {
    const { sender, message } = plan.request;
    if (duplicates.has(plan.key)) {
      plan.outcome = { ok: true, value: await originalMessage(client, sender, message.id) };
      continue;
    }
    plan.sameAs = first.get(plan.key);
    if (plan.sameAs) continue;
    first.set(plan.key, plan);
    if (revokedIds.has(sender.memberId)) {
      plan.outcome = refused(new ProtocolError('forbidden', 'the sending member is revoked'));
      continue;
    }
    const meshMembers = byMesh.get(sender.meshId) ?? [];
    if (isMany(message.to)) {
      const group = message.to.startsWith('@') ? message.to.slice(1) : undefined;
      plan.recipients = meshMembers
        .filter((m) => m.id !== sender.memberId && (group === undefined || m.groups.includes(group)))
        .map((m) => m.id);
    } else {
      if (message.to === sender.pubkey && !message.allowSelf) {
        plan.outcome = refused(new ProtocolError('bad_request', 'cannot send a message to yourself'));
        continue;
      }
      const recipient = meshMembers.find((m) => m.pubkey === message.to);
      if (!recipient) {
        plan.outcome = refused(new ProtocolError('not_found', `no member ${message.to} in this mesh`));
        continue;
      }
      plan.recipients = [recipient.id];
    }
  }

  // 3. Lock the recipients' feeds, all at once and in member order, then apply the backlog bound.
  const owed = plans.filter((p) => !p.outcome && !p.sameAs);
  const memberIds = [...new Set(owed.flatMap((p) => p.recipients))].sort((a, b) => a - b);
  const feeds = new Map<number, { lastSeq: number; owed: number }>();
  if (memberIds.length > 0) {
    const locked = await client.query<{ memberId: number; lastSeq: number; owed: number }>(
      `INSERT INTO delivery_feeds (member_id) SELECT unnest($1::bigint[])
       ON CONFLICT (member_id) DO UPDATE SET last_seq = delivery_feeds.last_seq
       RETURNING member_id AS "memberId", last_seq AS "lastSeq",
                 (SELECT count(*)::int FROM deliveries d WHERE d.member_id = delivery_feeds.member_id) AS owed`,
      [memberIds],
    );
    for (const row of locked.rows) feeds.set(row.memberId, { lastSeq: row.lastSeq, owed: row.owed });
  }
  for (const plan of owed) {
    const full = plan.recipients.filter((id) => feeds.get(id)!.owed >= policy.backlogMax);
    if (full.length > 0 && !isMany(plan.request.message.to)) {
      plan.outcome = refused(
        new ProtocolError(
          'limit_exceeded',
          `the recipient's backlog is full (${policy.backlogMax} unacked messages)`,
        ),
      );
      continue;
    }
    plan.dropped = full.length;
    plan.recipients = plan.recipients.filter((id) => !full.includes(id));
    for (const id of plan.recipients) feeds.get(id)!.owed++;
  }

  // 4. The messages, then their rows with each recipient's next seq.
  const toStore = plans.filter((p) => !p.outcome && !p.sameAs);
  if (toStore.length > 0) {
    const inserted = await client.query<{
      id: number;
      createdAt: Date;
      meshId: string;
      senderId: number;
      clientId: string;
    }>(
      `INSERT INTO messages (mesh_id, sender_id, sender_session, client_id, target, body, kind, schedule_id, occurrence,
                             recipients)
       SELECT u.mesh_id, u.sender_id, u.sender_session, u.client_id, u.target, u.body, u.kind, u.schedule_id,
              u.occurrence, string_to_array(u.recipients, ',')::bigint[]
         FROM unnest($1::uuid[], $2::bigint[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[],
                     $8::uuid[], $9::int[], $10::text[])
           AS u(mesh_id, sender_id, sender_session, client_id, target, body, kind, schedule_id, occurrence, recipients)
       ON CONFLICT (mesh_id, sender_id, client_id) DO NOTHING
       RETURNING id, created_at AS "createdAt", mesh_id AS "meshId", sender_id AS "senderId", client_id AS "clientId"`,
      [
        toStore.map((p) => p.request.sender.meshId),
        toStore.map((p) => p.request.sender.memberId),
        toStore.map((p) => p.request.sender.sessionId),
        toStore.map((p) => p.request.message.id),
        toStore.map((p) => p.request.message.to),
        toStore.map((p) => p.request.message.body),
        toStore.map((p) => p.request.message.kind ?? 'message'),
        toStore.map((p) => p.request.message.scheduleId ?? null),
        toStore.map((p) => p.request.message.occurrence ?? null),
        // Arrays of different lengths cannot ride in one unnest: each recipient list as text.
        toStore.map((p) => [...p.recipients].sort((a, b) => a - b).join(',')),
      ],
    );
    const ids = new Map(
      inserted.rows.map((row) => [keyOf(row.meshId, Number(row.senderId), row.clientId), row]),
    );
    for (const plan of toStore) {
      const row = ids.get(plan.key);
      if (row) {
        plan.messageId = Number(row.id);
        plan.createdAt = row.createdAt;
      } else {
        // Accepted meanwhile by another node (a retry racing the original): the original it is.
        for (const id of plan.recipients) feeds.get(id)!.owed--;
        plan.outcome = {
          ok: true,
          value: await originalMessage(client, plan.request.sender, plan.request.message.id),
        };
      }
    }
  }
  const stored = plans.filter((p) => p.messageId !== undefined);
  const rows = { messageIds: [] as number[], memberIds: [] as number[], seqs: [] as number[] };
  const seqsOf = new Map<Plan, Array<[number, number]>>();
  for (const plan of stored) {
    const seqs: Array<[number, number]> = [];
    for (const id of plan.recipients) {
      const feed = feeds.get(id)!;
      feed.lastSeq++;
      seqs.push([id, feed.lastSeq]);
      rows.messageIds.push(plan.messageId!);
      rows.memberIds.push(id);
      rows.seqs.push(feed.lastSeq);
    }
    seqsOf.set(plan, seqs);
  }
  if (rows.messageIds.length > 0) {
    await client.query(
      `WITH rows AS (
         INSERT INTO deliveries (message_id, member_id, seq)
         SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]))
       UPDATE delivery_feeds f SET last_seq = u.last_seq
         FROM unnest($4::bigint[], $5::bigint[]) AS u(member_id, last_seq)
        WHERE f.member_id = u.member_id`,
      [rows.messageIds, rows.memberIds, rows.seqs, memberIds, memberIds.map((id) => feeds.get(id)!.lastSeq)],
    );
  }

  for (const plan of stored) {
    const frame: DurableFrame = toFrame({
      id: plan.messageId!,
      clientId: plan.request.message.id,
      from: plan.request.sender.pubkey,
      fromSession: plan.request.sender.sessionId,
      target: plan.request.message.to,
      body: plan.request.message.body,
      kind: plan.request.message.kind ?? 'message',
      scheduleId: plan.request.message.scheduleId ?? null,
      occurrence: plan.request.message.occurrence ?? null,
      createdAt: plan.createdAt!,
    });
    const nodes =
      plan.request.message.to === '*'
        ? undefined
        : [...new Set(plan.recipients.flatMap((id) => nodesOf.get(id) ?? []))];
    plan.outcome = {
      ok: true,
      value: {
        frame,
        recipients: plan.recipients,
        seqs: seqsOf.get(plan)!,
        duplicate: false,
        nodes,
        dropped: plan.dropped,
      },
    };
  }
  for (const plan of plans) {
    if (!plan.sameAs) continue;
    const original = plan.sameAs.outcome!;
    plan.outcome = original.ok ? { ok: true, value: { ...original.value, duplicate: true } } : original;
  }
  return plans.map((plan) => plan.outcome!);
}

/** A broadcast (`*`) or a group message (`@group`): recipients resolved among the mesh's members. */
function isMany(to: string): boolean {
  return to === '*' || to.startsWith('@');
}

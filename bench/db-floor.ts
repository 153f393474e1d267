/**
 * b1) The database floor of a durable DM: the rows the broker writes per DM (broker/delivery/accept.ts and
 * acks.ts), written straight with `pg` on a fresh migrated database, as fast as Postgres takes them. Per
 * message: lock the recipient's `delivery_feeds` row (the broker's upsert … RETURNING, with its owed count),
 * insert the `messages` row with `recipients`, insert the `deliveries` row with the member's next `seq` and
 * raise `last_seq`, commit; then the ack deletes the delivery row (its own statement, as the broker's ack
 * batches are). No lookups, no audit, no bus, no sockets: what is left is Postgres's cost of the rows.
 *
 * Two modes, the same number of writers (one connection each, each with its own pairs, so no two writers
 * wait on one feed lock): `single` commits every message (and every ack) on its own, as the broker did
 * before group commit; `batched` writes BATCH messages per transaction and their acks in one statement.
 * Counted: messages whose ack committed during the measured window, per second.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { cpuMeter } from './lib/cpu.js';
import { createDatabase } from './lib/processes.js';
import { median, round } from './lib/stats.js';

export interface FloorOptions {
  runs: number;
  warmupMs: number;
  durationMs: number;
  writers: number;
  /** Sender → receiver pairs (one mesh each) per writer. */
  pairsPerWriter: number;
  /** Messages per transaction in the batched mode. */
  batch: number;
}

export interface FloorResult {
  mode: 'single' | 'batched';
  writers: number;
  messagesPerTransaction: number;
  runs: number[];
  medianPerSecond: number;
  /** CPU of the writers' Postgres backends per message (µs), median: compare with `dms`'s `postgres`. */
  medianPostgresCpuUsPerMessage: number;
}

interface Pair {
  meshId: string;
  senderId: number;
  receiverId: number;
  receiverPubkey: string;
  session: string;
}

async function makePairs(client: pg.Client, count: number): Promise<Pair[]> {
  const pairs: Pair[] = [];
  for (let i = 0; i < count; i++) {
    const mesh = await client.query<{ id: string }>('INSERT INTO meshes (name) VALUES ($1) RETURNING id', [
      `floor-${i}-${randomBytes(4).toString('hex')}`,
    ]);
    const meshId = mesh.rows[0]!.id;
    const keys = [randomBytes(32).toString('hex'), randomBytes(32).toString('hex')];
    const members = await client.query<{ id: string }>(
      'INSERT INTO members (mesh_id, pubkey) SELECT $1, unnest($2::text[]) RETURNING id',
      [meshId, keys],
    );
    pairs.push({
      meshId,
      senderId: Number(members.rows[0]!.id),
      receiverId: Number(members.rows[1]!.id),
      receiverPubkey: keys[1]!,
      session: randomUUID(),
    });
  }
  return pairs;
}

/** One accept transaction for `pairs[i]` (one message each, as accept.ts writes them), then their acks. */
async function writeMessages(client: pg.Client, pairs: Pair[], prefix: string, next: () => number) {
  await client.query('BEGIN');
  try {
    const memberIds = [...new Set(pairs.map((p) => p.receiverId))].sort((a, b) => a - b);
    const locked = await client.query<{ memberId: string; lastSeq: string }>(
      `INSERT INTO delivery_feeds (member_id) SELECT unnest($1::bigint[])
       ON CONFLICT (member_id) DO UPDATE SET last_seq = delivery_feeds.last_seq
       RETURNING member_id AS "memberId", last_seq AS "lastSeq",
                 (SELECT count(*)::int FROM deliveries d WHERE d.member_id = delivery_feeds.member_id) AS owed`,
      [memberIds],
    );
    const last = new Map(locked.rows.map((r) => [Number(r.memberId), Number(r.lastSeq)]));
    const inserted = await client.query<{ id: string }>(
      `INSERT INTO messages (mesh_id, sender_id, sender_session, client_id, target, body, kind, recipients)
       SELECT u.mesh_id, u.sender_id, u.sender_session, u.client_id, u.target, u.body, 'message',
              string_to_array(u.recipients, ',')::bigint[]
         FROM unnest($1::uuid[], $2::bigint[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[])
           AS u(mesh_id, sender_id, sender_session, client_id, target, body, recipients)
       ON CONFLICT (mesh_id, sender_id, client_id) DO NOTHING
       RETURNING id`,
      [
        pairs.map((p) => p.meshId),
        pairs.map((p) => p.senderId),
        pairs.map((p) => p.session),
        pairs.map(() => `${prefix}-${next()}`),
        pairs.map((p) => p.receiverPubkey),
        pairs.map(() => JSON.stringify({ t: performance.now() })),
        pairs.map((p) => String(p.receiverId)),
      ],
    );
    const messageIds = inserted.rows.map((r) => Number(r.id));
    const seqs = pairs.map((p) => {
      const seq = last.get(p.receiverId)! + 1;
      last.set(p.receiverId, seq);
      return seq;
    });
    await client.query(
      `WITH rows AS (
         INSERT INTO deliveries (message_id, member_id, seq)
         SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]))
       UPDATE delivery_feeds f SET last_seq = u.last_seq
         FROM unnest($4::bigint[], $5::bigint[]) AS u(member_id, last_seq)
        WHERE f.member_id = u.member_id`,
      [messageIds, pairs.map((p) => p.receiverId), seqs, memberIds, memberIds.map((id) => last.get(id)!)],
    );
    await client.query('COMMIT');
    return { messageIds, memberIds: pairs.map((p) => p.receiverId) };
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
}

async function ack(client: pg.Client, messageIds: number[], memberIds: number[]) {
  await client.query(
    `DELETE FROM deliveries d USING unnest($1::bigint[], $2::bigint[]) AS u(message_id, member_id)
      WHERE d.message_id = u.message_id AND d.member_id = u.member_id`,
    [messageIds, memberIds],
  );
}

async function measure(
  clients: pg.Client[],
  pairsOf: Pair[][],
  perTransaction: number,
  options: FloorOptions,
): Promise<{ perSecond: number; postgresCpuUsPerMessage: number }> {
  let stopped = false;
  let counted = 0;
  let from = Number.POSITIVE_INFINITY;
  let to = Number.POSITIVE_INFINITY;
  const prefix = randomBytes(6).toString('hex');
  let n = 0;
  const next = () => n++;
  const writer = async (w: number) => {
    const pairs = pairsOf[w]!;
    let k = 0;
    while (!stopped) {
      const batch = Array.from({ length: perTransaction }, () => pairs[k++ % pairs.length]!);
      const written = await writeMessages(clients[w]!, batch, prefix, next);
      await ack(clients[w]!, written.messageIds, written.memberIds);
      const now = performance.now();
      if (now >= from && now < to) counted += batch.length;
    }
  };
  const writers = clients.map((_, w) => writer(w));
  await new Promise((resolve) => setTimeout(resolve, options.warmupMs));
  const postgres = cpuMeter(clients.map((c) => (c as unknown as { processID: number }).processID));
  from = performance.now();
  await new Promise((resolve) => setTimeout(resolve, options.durationMs));
  to = performance.now();
  const postgresSeconds = postgres();
  stopped = true;
  await Promise.all(writers);
  return {
    perSecond: Math.round(counted / ((to - from) / 1000)),
    postgresCpuUsPerMessage: counted ? round((postgresSeconds * 1e6) / counted) : 0,
  };
}

export async function benchDbFloor(options: FloorOptions): Promise<FloorResult[]> {
  const url = await createDatabase('floor');
  const admin = new pg.Client({ connectionString: url });
  const clients = Array.from({ length: options.writers }, () => new pg.Client({ connectionString: url }));
  await admin.connect();
  for (const client of clients) await client.connect();
  try {
    const pairs = await makePairs(admin, options.writers * options.pairsPerWriter);
    const pairsOf = clients.map((_, w) =>
      pairs.slice(w * options.pairsPerWriter, (w + 1) * options.pairsPerWriter),
    );
    const modes = [
      { mode: 'single' as const, perTransaction: 1, runs: [] as number[], cpu: [] as number[] },
      { mode: 'batched' as const, perTransaction: options.batch, runs: [] as number[], cpu: [] as number[] },
    ];
    // Interleaved, so the machine's noise spreads over both.
    for (let run = 0; run < options.runs; run++)
      for (const mode of modes) {
        const result = await measure(clients, pairsOf, mode.perTransaction, options);
        mode.runs.push(result.perSecond);
        mode.cpu.push(result.postgresCpuUsPerMessage);
      }
    return modes.map((mode) => ({
      mode: mode.mode,
      writers: options.writers,
      messagesPerTransaction: mode.perTransaction,
      runs: mode.runs,
      medianPerSecond: Math.round(median(mode.runs)),
      medianPostgresCpuUsPerMessage: round(median(mode.cpu)),
    }));
  } finally {
    for (const client of [admin, ...clients]) await client.end().catch(() => {});
  }
}

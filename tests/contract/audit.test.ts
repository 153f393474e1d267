/**
 * Contract of `AuditLog` (broker/audit/audit.ts), against LocalAuditLog (one node, `ha.audit` off) and
 * SharedAuditLog (two nodes, on): `record` never blocks the caller; entries are appended in order, to one
 * hash chain per mesh; `flush` (what `audit.query` / `audit.verify` wait for) resolves once what was
 * recorded before is written, so a peer sees what it just caused; appends from every node at once never
 * fork the chain; and the chain stays intact, every event recorded once, while the flag is flipped there
 * and back twice under traffic.
 *
 * The chain is checked twice: by the node (`audit.verify`) and here, from the entries `audit.query`
 * returns, against the formula of docs/protocol.md § Audit (independent of broker/audit/chain.ts).
 */
import { createHash } from 'node:crypto';
import type { MeshClient } from '@mesh-broker/sdk';
import { describe, expect, it } from 'vitest';
import type { AuditEntry, AuditVerifyResult, Frame } from '../../protocol/frames.js';
import type { TestMesh } from '../helpers/mesh.js';
import { waitFor } from '../helpers/wait.js';
import { flipSequence, useWorld, WORLDS } from './harness.js';

/** docs/protocol.md § Audit: keys sorted by UTF-16 code unit, no whitespace, undefined members dropped. */
function canonical(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value))
    return `[${value.map((v) => (v === undefined ? 'null' : canonical(v))).join(',')}]`;
  const keys = Object.keys(value)
    .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
    .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`).join(',')}}`;
}

/** What is wrong with a mesh's chain (oldest first): empty when it is one intact chain 1, 2, … */
function chainProblems(meshId: string, entries: AuditEntry[]): string[] {
  const problems: string[] = [];
  let previous: AuditEntry | undefined;
  for (const entry of entries) {
    const seq = (previous?.seq ?? 0) + 1;
    if (entry.seq !== seq) problems.push(`seq ${entry.seq} where ${seq} was due`);
    if (entry.prevHash !== (previous?.hash ?? 'genesis'))
      problems.push(`seq ${entry.seq}: prevHash does not link`);
    const text = [
      entry.prevHash,
      meshId,
      entry.seq,
      entry.eventType,
      entry.actor ?? '',
      canonical(entry.payload),
      entry.createdAt,
    ].join('|');
    if (createHash('sha256').update(text, 'utf8').digest('hex') !== entry.hash)
      problems.push(`seq ${entry.seq}: hash does not match its fields`);
    previous = entry;
  }
  return problems;
}

describe.each(WORLDS)('AuditLog contract, %s', (kind) => {
  const world = useWorld(kind, {
    flag: 'ha.audit',
    env: { SEND_BURST: '100000', SEND_RATE_PER_MIN: '1000000' },
  });

  /** Every entry of the client's mesh, oldest first (paged through audit.query, which flushes first). */
  async function entries(client: MeshClient): Promise<AuditEntry[]> {
    const all: AuditEntry[] = [];
    let before: number | undefined;
    for (;;) {
      const page = await client.request<Frame & { entries: AuditEntry[]; more?: boolean }>({
        type: 'audit.query',
        limit: 1000,
        ...(before === undefined ? {} : { before }),
      });
      all.push(...page.entries);
      const lowest = page.entries.at(-1)?.seq;
      // A page ends at `limit` or at its byte bound (then it says `more`): either way more may follow.
      // (Stopping at a short page lost the oldest entries once a chain outgrew one byte-bounded page.)
      if ((page.entries.length < 1000 && !page.more) || lowest === undefined || lowest <= 1) break;
      before = lowest;
    }
    return all.reverse();
  }

  const verify = (client: MeshClient) => client.request<Frame & AuditVerifyResult>({ type: 'audit.verify' });

  /** The chain as both the node and this test see it: intact, one entry per seq. */
  async function intact(client: MeshClient, mesh: TestMesh) {
    const verified = await verify(client);
    const all = await entries(client);
    return { verified, all, problems: chainProblems(mesh.meshId, all) };
  }

  it('what a peer just caused is already in the chain when it asks (flush), in order, on any node', async () => {
    const mesh = await world.mesh(2);
    const onA = await world.peer(world.a, mesh, mesh.members[0]!);
    const onB = await world.peer(world.b, mesh, mesh.members[1]!);
    const sent = await onA.send(mesh.members[1]!.pubkey, 'hello');
    const afterSend = await entries(onA);
    expect(afterSend.at(-1)).toMatchObject({
      eventType: 'message.sent',
      actor: mesh.members[0]!.pubkey,
      payload: expect.objectContaining({ messageId: sent.messageId }),
    });
    await onB.request({ type: 'mcp.register', server: 'calc', tools: [] });
    const afterRegister = await entries(onB);
    expect(afterRegister.at(-1)).toMatchObject({
      eventType: 'mcp.registered',
      actor: mesh.members[1]!.pubkey,
    });
    // Both joins, the send and the registration in one chain; the send (flushed by A's query) comes
    // before the registration made after it. Entries of different nodes are ordered only that way.
    const events = afterRegister.map((e) => e.eventType);
    expect(events.filter((e) => e === 'peer.joined')).toHaveLength(2);
    expect(events.indexOf('message.sent')).toBeLessThan(events.indexOf('mcp.registered'));
    expect(events.at(-1)).toBe('mcp.registered');
    const { verified, problems } = await intact(onA, mesh);
    expect(problems).toEqual([]);
    expect(verified).toMatchObject({ valid: true, forks: [], entries: afterRegister.length });
  });

  it("one node's entries of a mesh are appended in the order recorded", async () => {
    const mesh = await world.mesh(2);
    const sender = await world.peer(world.b, mesh, mesh.members[0]!);
    const ids: string[] = [];
    for (let i = 0; i < 25; i++) ids.push((await sender.send(mesh.members[1]!.pubkey, String(i))).messageId);
    const sentEntries = (await entries(sender)).filter((e) => e.eventType === 'message.sent');
    expect(sentEntries.map((e) => (e.payload as { messageId: string }).messageId)).toEqual(ids);
  });

  it('appends from every node to one mesh at once: one chain, never forked, every event once', async () => {
    const mesh = await world.mesh(2);
    const onA = await world.peer(world.a, mesh, mesh.members[0]!);
    const onB = await world.peer(world.b, mesh, mesh.members[1]!);
    const each = 40;
    await Promise.all([
      ...Array.from({ length: each }, (_, i) => onA.send(mesh.members[1]!.pubkey, `a${i}`)),
      ...Array.from({ length: each }, (_, i) => onB.send(mesh.members[0]!.pubkey, `b${i}`)),
    ]);
    await verify(onB); // flushes B's queue of the mesh; the next calls flush A's
    const { verified, all, problems } = await intact(onA, mesh);
    expect(problems).toEqual([]);
    expect(verified).toMatchObject({ valid: true, forks: [] });
    const sentBy = (pubkey: string) =>
      all.filter((e) => e.eventType === 'message.sent' && e.actor === pubkey).length;
    expect([sentBy(mesh.members[0]!.pubkey), sentBy(mesh.members[1]!.pubkey)]).toEqual([each, each]);
  });

  it('flips ha.audit there and back twice under traffic: the chain stays one intact chain, every send audited once', async () => {
    const mesh = await world.mesh(3);
    const [aKeys, bKeys, recipientKeys] = mesh.members;
    // Traffic through A the whole time; through B only while the contract reaches across the nodes
    // (with the flag off in the cluster, two nodes appending to one mesh fork it: the local gap).
    const onA = await world.peer(world.a, mesh, aKeys!);
    const onB = await world.peer(world.b, mesh, bKeys!);
    await world.peer(world.a, mesh, recipientKeys!);
    const counts = { a: 0, b: 0 };
    let sending = true;
    const traffic = (async () => {
      while (sending && counts.a < 100_000) {
        await onA.send(recipientKeys!.pubkey, `a${counts.a}`);
        counts.a++;
      }
    })();
    const problems: string[] = [];
    const sendFromB = async (label: string) => {
      if (!world.crossNode()) return;
      await Promise.all(
        Array.from({ length: 10 }, (_, i) => onB.send(recipientKeys!.pubkey, `b${label}${i}`)),
      );
      counts.b += 10;
    };
    await sendFromB('home');
    for (const [i, target] of flipSequence(world).entries()) {
      const before = counts.a;
      // B's entries are written before the flip (its queue flushed): while the nodes disagree for a
      // moment, a local writer on one node and a shared one on the other may fork a chain they both
      // append to (the documented mixed-cluster window, docs/design.md §3.2); A's traffic goes on.
      await verify(onB);
      await world.flip(target);
      await sendFromB(String(i));
      await waitFor(() => counts.a >= before + 10, { what: `flip ${i}: traffic through A` });
      await verify(onB);
      const { verified, problems: chain } = await intact(onA, mesh);
      if (!verified.valid || verified.forks.length > 0)
        problems.push(`flip ${i}: audit.verify ${JSON.stringify(verified)}`);
      problems.push(...chain.map((p) => `flip ${i}: ${p}`));
    }
    sending = false;
    await traffic;
    await verify(onB);
    const { all, problems: chain } = await intact(onA, mesh);
    expect([...problems, ...chain]).toEqual([]);
    const sent = all.filter((e) => e.eventType === 'message.sent');
    expect(sent.filter((e) => e.actor === aKeys!.pubkey)).toHaveLength(counts.a);
    expect(sent.filter((e) => e.actor === bKeys!.pubkey)).toHaveLength(counts.b);
    // Every send once: no message id audited twice.
    const ids = sent.map((e) => (e.payload as { messageId: string }).messageId);
    expect(new Set(ids).size).toBe(ids.length);
  }, 60_000);
});

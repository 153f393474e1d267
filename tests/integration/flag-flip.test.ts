import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { renderFlagsDocument } from '../../flags/document.js';
import { defaultFlagValues } from '../../flags/registry.js';
import type { Message } from '../../protocol/frames.js';
import { closeAllClients, connectPeer, createMesh } from '../helpers/mesh.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let dir: string;
let node: InProcessNode;

const setFlags = (values: Partial<ReturnType<typeof defaultFlagValues>>) =>
  writeFileSync(join(dir, 'flip.json'), renderFlagsDocument({ ...defaultFlagValues(), ...values }));

beforeAll(async () => {
  db = await createTestDatabase('flag_flip');
  dir = mkdtempSync(join(tmpdir(), 'wb-flip-'));
  setFlags({});
  node = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: {
      FLAGS_DIR: dir,
      FLAGS_ENV: 'flip',
      SEND_BURST: '100000',
      SEND_RATE_PER_MIN: '1000000',
    },
  });
});
afterEach(closeAllClients);
afterAll(async () => {
  await node?.stop();
  rmSync(dir, { recursive: true, force: true });
  await db?.drop();
});

async function acting(flag: string): Promise<boolean> {
  const report = (await (await fetch(`${node.url}/flags`)).json()) as {
    flags: Record<string, { acting: boolean }>;
  };
  return report.flags[flag]!.acting;
}

describe('switching rows at runtime under traffic', () => {
  it('flips ha.audit and ha.rate-limits back and forth while peers send: nothing lost, chain intact', async () => {
    const mesh = await createMesh(node, 2);
    const a = await connectPeer(node.wsUrl, mesh, mesh.members[0]!);
    const b = await connectPeer(node.wsUrl, mesh, mesh.members[1]!);
    const received: Message[] = [];
    b.on('message', (m) => received.push(m));
    let sending = true;
    let sent = 0;
    const sender = (async () => {
      while (sending && sent < 3000) {
        await Promise.all(
          Array.from({ length: 10 }, (_, i) => a.send(mesh.members[1]!.pubkey, String(sent + i))),
        );
        sent += 10;
      }
    })();
    for (let flip = 0; flip < 6; flip++) {
      const on = flip % 2 === 0;
      setFlags({ 'ha.audit': on, 'ha.rate-limits': on });
      await waitFor(
        async () => (await acting('ha.audit')) === on && (await acting('ha.rate-limits')) === on,
        {
          what: `flip ${flip}`,
        },
      );
      await waitFor(() => received.length >= sent); // traffic kept flowing across the switch
    }
    sending = false;
    await sender;
    await waitFor(() => received.length === sent, { timeoutMs: 10_000, what: `${sent} messages` });
    // Every message, once, in order.
    expect(received.map((m) => Number(m.body))).toEqual([...Array(sent).keys()]);
    // Every send was audited exactly once, whichever writer was in use, and the chain never forked.
    const verify = await a.request<{ type: string; valid: boolean; entries: number; forks: unknown[] }>({
      type: 'audit.verify',
    });
    expect(verify).toMatchObject({ valid: true, forks: [] });
    const sentEvents = await db.query(
      "SELECT count(*)::int AS n FROM audit_log WHERE mesh_id = $1 AND event_type = 'message.sent'",
      [mesh.meshId],
    );
    expect(sentEvents.rows[0]?.n).toBe(sent);
    const metrics = await (await fetch(`${node.url}/metrics`)).text();
    expect(metrics).toMatch(/mesh_broker_audit_appends_total\{mode="shared",node="[^"]+"\} [1-9]/);
    expect(metrics).toMatch(/mesh_broker_audit_appends_total\{mode="local",node="[^"]+"\} [1-9]/);
  });
});

/**
 * `workbench flags set KEY shadow` with the file provider (docs/flags.md § Shadow, issue 27 item 3), as a
 * user runs it: the CLI process against a flags file and the audit database. Shadow is written as
 * `"shadow"`, read back, audited once (a move between off and shadow serves nothing new but is on the
 * record, with its modes), kept for the other flags when one is set on or off, and a bad value exits 2
 * and changes neither the file nor the audit chain.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderFlagsDocument } from '../../flags/document.js';
import { defaultFlagValues } from '../../flags/registry.js';
import { runWorkbench } from '../helpers/cli.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

const ENV = 'wbshadow';
let db: TestDatabase;
let dir: string;
let cliEnv: Record<string, string>;
const file = () => join(dir, `${ENV}.json`);
const flagsInFile = () =>
  (JSON.parse(readFileSync(file(), 'utf8')) as { flags: Record<string, unknown> }).flags;
const set = (flag: string, value: string) =>
  runWorkbench(['flags', 'set', flag, value, '--env', ENV], cliEnv);
const events = async () =>
  (
    await db.query<{ payload: Record<string, unknown> }>(
      `SELECT payload FROM audit_log WHERE event_type = 'flag.changed' AND payload->>'environment' = $1 ORDER BY seq`,
      [ENV],
    )
  ).rows.map((row) => row.payload);

beforeAll(async () => {
  db = await createTestDatabase('flags_shadow');
  dir = mkdtempSync(join(tmpdir(), 'wb-flags-shadow-'));
  writeFileSync(file(), renderFlagsDocument(defaultFlagValues()));
  cliEnv = {
    DATABASE_URL: db.url,
    FLAGS_DIR: dir,
    REDIS_KEY_PREFIX: `wbtest:${randomBytes(4).toString('hex')}:`,
    WORKBENCH_ACTOR: 'release-manager',
  };
});
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  await db?.drop();
});

describe('workbench flags set KEY shadow (file provider)', () => {
  it('writes shadow, reads it back, audits the move once, and keeps other flags in shadow', async () => {
    const toShadow = await set('ha.streams', 'shadow');
    expect(toShadow.code, toShadow.stderr).toBe(0);
    expect(toShadow.stdout).toContain(`ha.streams: off → shadow in ${ENV}`);
    expect(flagsInFile()['ha.streams']).toBe('shadow');
    expect(await events()).toEqual([
      { environment: ENV, flag: 'ha.streams', from: false, to: false, fromMode: 'off', toMode: 'shadow' },
    ]);

    const again = await set('ha.streams', 'shadow');
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('ha.streams is already shadow');
    expect(await events()).toHaveLength(1);

    // Another flag to shadow, then the first one on: the second stays in shadow.
    expect((await set('ha.mcp', 'shadow')).code).toBe(0);
    const on = await set('ha.streams', 'on');
    expect(on.code, on.stderr).toBe(0);
    expect(on.stdout).toContain(`ha.streams: shadow → on in ${ENV}`);
    expect(flagsInFile()).toMatchObject({ 'ha.streams': true, 'ha.mcp': 'shadow' });
    expect((await events()).at(-1)).toEqual({
      environment: ENV,
      flag: 'ha.streams',
      from: false,
      to: true,
      fromMode: 'shadow',
      toMode: 'on',
    });
    expect((await runWorkbench(['audit', 'verify', '--database-url', db.url])).code).toBe(0);
  }, 120_000);

  it('refuses a bad value with exit 2 and changes nothing', async () => {
    const before = readFileSync(file(), 'utf8');
    const audited = (await events()).length;
    for (const value of ['shadw', 'SHADOW', 'true']) {
      const bad = await set('ha.mcp', value);
      expect(bad.code, value).toBe(2);
      expect(bad.stderr).toContain(`flag value must be "on", "off" or "shadow", got "${value}"`);
    }
    expect(readFileSync(file(), 'utf8')).toBe(before);
    expect(await events()).toHaveLength(audited);
  }, 120_000);
});

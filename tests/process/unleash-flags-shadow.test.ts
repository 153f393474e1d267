/**
 * `workbench flags set KEY shadow` with the Unleash provider (docs/flags.md, issue 27 item 3), against a real
 * unleash-server 8.2.0: the CLI enables the toggle with one environment variant named `shadow`, reads it back
 * as shadow, and a node on the Unleash provider then runs the flag at shadow; `on` removes the variant.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderFlagsDocument } from '../../flags/document.js';
import { defaultFlagValues } from '../../flags/registry.js';
import { runWorkbench } from '../helpers/cli.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { startUnleash, type TestUnleash } from '../helpers/unleash.js';
import { waitFor } from '../helpers/wait.js';

const ENV = 'ushadow';
let db: TestDatabase;
let unleash: TestUnleash;
let node: InProcessNode;
let dir: string;
const prefix = `wbtest:${randomBytes(4).toString('hex')}:`;

const modeOf = async (flag: string) =>
  ((await (await fetch(`${node.url}/flags`)).json()) as { flags: Record<string, { mode: string }> }).flags[
    flag
  ]?.mode;

beforeAll(async () => {
  db = await createTestDatabase('unleash_flags_shadow');
  unleash = await startUnleash();
  dir = mkdtempSync(join(tmpdir(), 'wb-ushadow-'));
  writeFileSync(join(dir, `${ENV}.json`), renderFlagsDocument(defaultFlagValues()));
  node = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: {
      FLAGS_PROVIDER: 'unleash',
      UNLEASH_URL: `${unleash.url}/api`,
      UNLEASH_REFRESH_MS: '60000',
      FLAGS_ENV: ENV,
      FLAGS_DIR: dir,
      STATE_DIR: dir,
      REDIS_KEY_PREFIX: prefix,
    },
  });
}, 180_000);
afterAll(async () => {
  await node?.stop();
  await unleash?.stop();
  await db?.drop();
  rmSync(dir, { recursive: true, force: true });
});

describe('flags set KEY shadow with Unleash', () => {
  it('writes the shadow variant, reads it back, and the node runs the flag at shadow; on removes it', async () => {
    const cli = ['--env', ENV, '--provider', 'unleash', '--unleash-url', unleash.url];
    const env = { DATABASE_URL: db.url, REDIS_KEY_PREFIX: prefix };
    const shadow = await runWorkbench(['flags', 'set', 'ha.streams', 'shadow', ...cli], env);
    expect(shadow.code, shadow.stderr).toBe(0);
    expect(shadow.stdout).toContain('ha.streams: off → shadow');
    await waitFor(async () => (await modeOf('ha.streams')) === 'shadow', { what: 'the node at shadow' });

    const on = await runWorkbench(['flags', 'set', 'ha.streams', 'on', ...cli], env);
    expect(on.code, on.stderr).toBe(0);
    expect(on.stdout).toContain('ha.streams: shadow → on');
    await waitFor(async () => (await modeOf('ha.streams')) === 'on', { what: 'the node on' });

    const bad = await runWorkbench(['flags', 'set', 'ha.streams', 'shadw', ...cli], env);
    expect(bad.code).toBe(2);
    expect(await modeOf('ha.streams')).toBe('on');
  }, 120_000);
});

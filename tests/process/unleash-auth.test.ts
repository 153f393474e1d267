/**
 * Unleash as deployed: authentication on, real tokens (an admin token for the workbench, a backend token
 * per Unleash environment for the nodes), OSS Unleash's two environments, and the `/api` form of the URL.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderFlagsDocument } from '../../flags/document.js';
import { defaultFlagValues, FLAG_KEYS, phasePreset } from '../../flags/registry.js';
import { runWorkbench } from '../helpers/cli.js';
import { inOperatorDir, writeEnvironmentFile } from '../helpers/environments.js';
import { type InProcessNode, startNode } from '../helpers/nodes.js';
import { freePort } from '../helpers/ports.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { startUnleash, type TestUnleash, tokenSecret } from '../helpers/unleash.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let unleash: TestUnleash;
let flagsDir: string;
let stateDir: string;
const prefix = `wbtest:unleash-auth:${process.pid}:`;
const started: InProcessNode[] = [];

interface Report {
  source: string;
  error: string | null;
  status: string;
  flags: Record<string, { value: boolean; acting: boolean }>;
}
const report = async (node: InProcessNode) => (await (await fetch(`${node.url}/flags`)).json()) as Report;

beforeAll(async () => {
  [db, unleash] = await Promise.all([
    createTestDatabase('unleash_auth'),
    startUnleash({ authWithBackendTokens: ['development', 'production'] }),
  ]);
  flagsDir = mkdtempSync(join(tmpdir(), 'wb-unleash-auth-flags-'));
  stateDir = mkdtempSync(join(tmpdir(), 'wb-unleash-auth-state-'));
  for (const env of ['staging', 'prod', 'seeded', 'fromfile'])
    writeFileSync(join(flagsDir, `${env}.json`), renderFlagsDocument(defaultFlagValues()));
}, 120_000);
afterAll(async () => {
  await Promise.all(started.map((n) => n.stop()));
  await unleash?.stop();
  await db?.drop();
  rmSync(flagsDir, { recursive: true, force: true });
  rmSync(stateDir, { recursive: true, force: true });
});

async function unleashNode(id: string, env: string, token: string | undefined, refreshMs = 60_000) {
  const node = await startNode({
    kind: 'in-process',
    databaseUrl: db.url,
    env: {
      NODE_ID: id,
      FLAGS_PROVIDER: 'unleash',
      UNLEASH_URL: `${unleash.url}/api`,
      ...(token ? { UNLEASH_API_TOKEN: token } : {}),
      UNLEASH_REFRESH_MS: String(refreshMs),
      FLAGS_ENV: env,
      FLAGS_DIR: flagsDir,
      STATE_DIR: stateDir,
      REDIS_KEY_PREFIX: prefix,
    },
  });
  started.push(node);
  return node;
}

/** `workbench flags …` against this file's Unleash (admin token) and database. */
function flags(args: string[], options: { url?: string; token?: string | null; cwd?: string } = {}) {
  const token = options.token === undefined ? unleash.adminToken! : options.token;
  return runWorkbench(
    [
      'flags',
      ...args,
      '--provider',
      'unleash',
      '--unleash-url',
      options.url ?? `${unleash.url}/api`,
      ...(token === null ? [] : ['--unleash-token', token]),
    ],
    { DATABASE_URL: db.url, REDIS_KEY_PREFIX: prefix, UNLEASH_ADMIN_TOKEN: '' },
    options.cwd,
  );
}

async function auditedChanges(environment: string) {
  const rows = await db.query<{ payload: { flag: string; from: boolean; to: boolean } }>(
    `SELECT payload FROM audit_log WHERE event_type = 'flag.changed' AND payload->>'environment' = $1 ORDER BY seq`,
    [environment],
  );
  return rows.rows.map((r) => r.payload);
}

/** What Unleash itself says (admin API), for checking the CLI's writes independently of the CLI. */
async function unleashFeatures(): Promise<
  Array<{ name: string; environments: Array<{ name: string; enabled: boolean }> }>
> {
  const response = await fetch(`${unleash.url}/api/admin/projects/default/features`, {
    headers: { authorization: unleash.adminToken! },
  });
  expect(response.status).toBe(200);
  return ((await response.json()) as { features: never[] }).features;
}

const enabledIn = async (flag: string, environment: string) =>
  (await unleashFeatures()).find((f) => f.name === flag)?.environments.find((e) => e.name === environment)
    ?.enabled;

describe('Unleash with authentication on (unleash-server 8.2.0, real tokens)', () => {
  it('flags set with an /api URL writes Unleash, reads it back and audits once; each node reads the environment its backend token is for', async () => {
    const set = await flags([
      'set',
      'ha.rate-limits',
      'on',
      '--env',
      'staging',
      '--unleash-environment',
      'development',
    ]);
    expect(set.stderr).toBe('');
    expect(set.code).toBe(0);
    expect(await enabledIn('ha.rate-limits', 'development')).toBe(true);
    expect(await enabledIn('ha.rate-limits', 'production')).toBe(false);
    expect(await auditedChanges('staging')).toEqual([
      { environment: 'staging', flag: 'ha.rate-limits', from: false, to: true },
    ]);
    // The server-root form of the URL names the same server: the flag is already on, nothing more audited.
    const again = await flags(['set', 'ha.rate-limits', 'on', '--env', 'staging'], { url: unleash.url });
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('already on');
    expect(await auditedChanges('staging')).toHaveLength(1);

    // Same FLAGS_ENV-independent rule for nodes: the token decides the Unleash environment.
    const [dev, prod] = await Promise.all([
      unleashNode('auth-dev', 'staging', unleash.backendTokens.development),
      unleashNode('auth-prod', 'prod', unleash.backendTokens.production),
    ]);
    await waitFor(
      async () => (await Promise.all([dev, prod].map(report))).every((r) => r.source === 'unleash'),
      {
        timeoutMs: 10_000,
      },
    );
    const devReport = await report(dev);
    const prodReport = await report(prod);
    expect(devReport).toMatchObject({ status: 'ok', error: null });
    expect(devReport.flags['ha.rate-limits']).toMatchObject({ value: true, acting: true });
    expect(prodReport).toMatchObject({ status: 'ok', error: null });
    expect(prodReport.flags['ha.rate-limits']).toMatchObject({ value: false, acting: false });
  }, 120_000);

  it('flags set and list fail with exit 1 and write and audit nothing on a wrong token, a backend token, or a URL that is not the API', async () => {
    const cases: Array<[string, { url?: string; token?: string | null }, RegExp]> = [
      [
        'a wrong admin token',
        { token: '*:*.0000000000000000000000000000dead' },
        /answered 401 .*token is not valid/,
      ],
      ['no token', { token: null }, /answered 401 .*token is missing/],
      ['a backend token', { token: unleash.backendTokens.development }, /answered 403 .*not an admin token/],
      ['a URL with a wrong path', { url: `${unleash.url}/unleash` }, /answered 404|is not JSON/],
      [
        'a port nothing listens on',
        { url: `http://127.0.0.1:${await freePort()}/api` },
        /Unleash unreachable/,
      ],
    ];
    for (const [what, options, message] of cases) {
      const set = await flags(['set', 'ha.audit', 'on', '--env', 'staging'], options);
      expect(set.code, what).toBe(1);
      expect(set.stderr, what).toMatch(message);
      const list = await flags(['list', '--env', 'staging'], options);
      expect(list.code, what).toBe(1);
      expect(list.stderr, what).toMatch(message);
    }
    expect((await unleashFeatures()).map((f) => f.name)).not.toContain('ha.audit');
    expect((await auditedChanges('staging')).map((c) => c.flag)).toEqual(['ha.rate-limits']);
  }, 120_000); // a dozen CLI runs, each starting Node (slower on 24 and on loaded cores)

  it('an Unleash environment that does not exist (a phase or a deployment name) is refused: exit 2, named, nothing created', async () => {
    for (const args of [
      ['set', 'ha.audit', 'on', '--env', 'staging', '--unleash-environment', 'phase3'],
      ['list', '--env', 'staging', '--unleash-environment', 'phase3'],
      ['seed', '--env', 'staging', '--phase', '3', '--unleash-environment', 'staging'],
    ]) {
      const result = await flags(args);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr, args.join(' ')).toMatch(
        /Unleash has no environment "(phase3|staging)" \(it has development, production\)/,
      );
    }
    expect((await unleashFeatures()).map((f) => f.name)).not.toContain('ha.audit');
    expect((await auditedChanges('staging')).map((c) => c.flag)).toEqual(['ha.rate-limits']);
  }, 120_000);

  it('flags set does not audit a write that does not read back (a gateway that answers 200 and drops it): exit 1', async () => {
    // A proxy in front of Unleash that swallows "turn on" calls: the write "succeeds", Unleash never saw it.
    const gateway: Server = createServer((incoming, outgoing) => {
      if (incoming.method === 'POST' && /\/environments\/development\/on$/.test(incoming.url ?? '')) {
        incoming.resume();
        outgoing.writeHead(200, { 'content-type': 'application/json' }).end('{}');
        return;
      }
      const upstream = request(
        `${unleash.url}${incoming.url}`,
        { method: incoming.method, headers: incoming.headers },
        (answer) => {
          outgoing.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(outgoing);
        },
      );
      incoming.pipe(upstream);
    });
    await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve));
    const port = (gateway.address() as { port: number }).port;
    try {
      const set = await flags(['set', 'ha.watches', 'on', '--env', 'staging'], {
        url: `http://127.0.0.1:${port}/api`,
      });
      expect(set.code).toBe(1);
      expect(set.stderr).toContain('ha.watches: wrote on to');
      expect(set.stderr).toContain('but it reads back off; nothing audited');
    } finally {
      await new Promise((resolve) => gateway.close(resolve));
    }
    expect(await enabledIn('ha.watches', 'development')).toBe(false);
    expect((await auditedChanges('staging')).map((c) => c.flag)).toEqual(['ha.rate-limits']);
  }, 120_000);

  it('a node whose token Unleash refuses reports unauthorized (/flags, metrics), keeps polling with backoff, and recovers once the token exists', async () => {
    // The token the node is configured with does not exist in Unleash yet (a fresh Unleash, say).
    const token = tokenSecret('*', 'development');
    const node = await unleashNode('auth-late', 'staging', token, 300);
    const first = await report(node);
    expect(first.status).toBe('unauthorized');
    expect(first.source).toBe('bootstrap');
    expect(first.error).toMatch(/^unauthorized: Unleash answered 401 .*UNLEASH_API_TOKEN/);
    expect(first.flags['ha.rate-limits']).toMatchObject({ value: false, acting: false }); // the file's value
    const metrics = await (await node.admin('/metrics')).text();
    expect(metrics).toMatch(/mesh_broker_flag_provider_status\{status="unauthorized"[^}]*\} 1/);
    expect(metrics).toMatch(/mesh_broker_flag_provider_status\{status="ok"[^}]*\} 0/);
    expect(metrics).toMatch(/mesh_broker_flag_config_error(\{[^}]*\})? 1/);
    // Unleash's API makes up a new token's secret, so a token a node already holds is created the way
    // INIT_BACKEND_API_TOKENS creates it at a first start: in Unleash's own token store.
    await unleash.db.query(
      `INSERT INTO api_tokens (secret, username, token_name, type, environment, created_by_user_id)
       VALUES ($1, 'late', 'late', 'backend', 'development', -1337)`,
      [token],
    );
    // No push, no restart: the node's own poll (backed off) finds the token valid and reads the flags.
    // Unleash remembers an unknown token for 1 s, 5 s, then 30 s after each miss, and loads every token
    // into its cache once a minute: within about 60 s of its creation the token is accepted.
    await waitFor(async () => (await report(node)).status === 'ok', { timeoutMs: 80_000, intervalMs: 200 });
    const recovered = await report(node);
    expect(recovered).toMatchObject({ source: 'unleash', error: null });
    // What Unleash says for development (on since the first test), not the file's off.
    const inUnleash = (await enabledIn('ha.rate-limits', 'development')) ?? false;
    expect(recovered.flags['ha.rate-limits']).toMatchObject({ value: inUnleash, acting: inUnleash });
    const after = await (await node.admin('/metrics')).text();
    expect(after).toMatch(/mesh_broker_flag_provider_status\{status="ok"[^}]*\} 1/);
    expect(after).toMatch(/mesh_broker_flag_provider_status\{status="unauthorized"[^}]*\} 0/);
  }, 120_000);

  it('flags seed --env E --phase N writes the preset into Unleash (creating the toggles), reads it back and audits each change once', async () => {
    const seeded = await flags([
      'seed',
      '--env',
      'seeded',
      '--phase',
      '1',
      '--unleash-environment',
      'production',
    ]);
    expect(seeded.stderr).toBe('');
    expect(seeded.code).toBe(0);
    expect(seeded.stdout).toContain("seeded phase 1's preset");
    const features = await unleashFeatures();
    for (const key of FLAG_KEYS) {
      const production = features
        .find((f) => f.name === key)
        ?.environments.find((e) => e.name === 'production');
      expect(production?.enabled, key).toBe(key === 'ha.presence' || key === 'ha.active-lease');
    }
    expect((await auditedChanges('seeded')).map((c) => `${c.flag}:${c.to}`)).toEqual([
      'ha.presence:true',
      'ha.active-lease:true',
    ]);
    // Seeding the next phase changes only what differs; seeding it again changes nothing.
    expect(
      (await flags(['seed', '--env', 'seeded', '--phase', '2', '--unleash-environment', 'production'])).code,
    ).toBe(0);
    const again = await flags([
      'seed',
      '--env',
      'seeded',
      '--phase',
      '2',
      '--unleash-environment',
      'production',
    ]);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('0 changes audited');
    expect((await auditedChanges('seeded')).map((c) => c.flag)).toEqual([
      'ha.presence',
      'ha.active-lease',
      'ha.delivery',
      'ha.connection-cap',
      'ha.rate-limits',
    ]);
    // A node with the production backend token acts on it.
    const node = await unleashNode('auth-seeded', 'seeded', unleash.backendTokens.production);
    await waitFor(async () => (await report(node)).flags['ha.delivery']?.acting, { timeoutMs: 10_000 });
    expect((await report(node)).flags['ha.audit']).toMatchObject({ value: false });
  }, 120_000);

  it('flags seed through an environment file (its URL in the /api form, its admin token variable)', async () => {
    await inOperatorDir('wb-unleash-auth-env-', async (cwd) => {
      writeEnvironmentFile(cwd, 'fromfile', {
        phase: 0,
        lbUrl: 'http://127.0.0.1:1',
        nodes: [{ id: 'n1', url: 'http://127.0.0.1:1' }],
        databaseUrlEnv: 'FROMFILE_DATABASE_URL',
        adminTokenEnv: 'FROMFILE_ADMIN_TOKEN',
        flags: {
          provider: 'unleash',
          url: `${unleash.url}/api`,
          tokenEnv: 'FROMFILE_UNLEASH_ADMIN_TOKEN',
          unleashEnvironment: 'development',
        },
      });
      const alreadyOn = new Set(
        (await unleashFeatures())
          .filter((f) => f.environments.find((e) => e.name === 'development')?.enabled)
          .map((f) => f.name),
      );
      const result = await runWorkbench(
        ['flags', 'seed', '--env', 'fromfile', '--phase', '3'],
        {
          FROMFILE_DATABASE_URL: db.url,
          FROMFILE_ADMIN_TOKEN: 'unused-unused-unused',
          FROMFILE_UNLEASH_ADMIN_TOKEN: unleash.adminToken!,
        },
        cwd,
      );
      expect(result.stderr).toBe('');
      expect(result.code).toBe(0);
      // Phase 3's preset: every flag but phase 4's (ha.regions).
      const preset = phasePreset(3);
      for (const key of FLAG_KEYS) expect(await enabledIn(key, 'development'), key).toBe(preset[key]);
      // Each change audited once (ha.rate-limits was on in development already, after the first test).
      expect((await auditedChanges('fromfile')).map((c) => c.flag)).toEqual(
        FLAG_KEYS.filter((key) => preset[key] && !alreadyOn.has(key)),
      );
    });
  }, 120_000);

  it('flags seed refuses bad input, naming what is wrong, and changes nothing', async () => {
    const state = async () =>
      JSON.stringify(
        (await unleashFeatures()).map((f) => [f.name, f.environments.map((e) => [e.name, e.enabled])]),
      );
    const before = await state();
    const auditCount = async () =>
      (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM audit_log')).rows[0]!.n;
    const auditBefore = await auditCount();
    const cases: Array<[string, string[], { url?: string; token?: string | null }, number, RegExp]> = [
      [
        'an unknown phase',
        ['--phase', '7'],
        {},
        2,
        /unknown phase "7" \(phases with a preset: 0, 1, 2, 3, 4\)/,
      ],
      ['no phase', [], {}, 2, /flags seed needs --phase N/],
      ['a phase that is not a number', ['--phase', 'three'], {}, 2, /unknown phase "three"/],
      [
        'an unknown Unleash environment',
        ['--phase', '3', '--unleash-environment', 'phase3'],
        {},
        2,
        /Unleash has no environment "phase3"/,
      ],
      [
        'an unreachable Unleash',
        ['--phase', '3'],
        { url: `http://127.0.0.1:${await freePort()}` },
        1,
        /Unleash unreachable/,
      ],
      [
        'a wrong token',
        ['--phase', '3'],
        { token: '*:*.0000000000000000000000000000dead' },
        1,
        /answered 401/,
      ],
    ];
    for (const [what, args, options, code, message] of cases) {
      const result = await flags(['seed', '--env', 'badseed', ...args], options);
      expect(result.code, what).toBe(code);
      expect(result.stderr, what).toMatch(message);
      expect(result.stdout, what).toBe('');
    }
    // An environment neither described by a file nor given an Unleash URL.
    const unknown = await runWorkbench(['flags', 'seed', '--env', 'nowhere', '--phase', '3'], {
      DATABASE_URL: db.url,
      UNLEASH_URL: '',
    });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(
      /unknown environment "nowhere": no environments\/nowhere.json here, and no --unleash-url/,
    );
    expect(await state()).toBe(before);
    expect(await auditCount()).toBe(auditBefore);
  }, 120_000);
});

/**
 * The compiled `workbench` as a user meets it: the usage, each command's help (exit 0), the version,
 * `status --json` always JSON (errors too), a wrong `--env` naming the environments there are, a down node's
 * flags unknown, and a bad `--junit` refused before anything runs.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { packageRoot } from '../../broker/paths.js';
import { runWorkbench } from '../helpers/cli.js';
import { writeEnvironmentFile } from '../helpers/environments.js';
import { freePort } from '../helpers/ports.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let cwd: string;
beforeAll(() => {
  cwd = mkdtempSync(join(tmpdir(), 'wb-cli-help-'));
});
afterAll(() => rmSync(cwd, { recursive: true, force: true }));

describe('workbench help and version', () => {
  it('--help, -h and help: the commands with a summary each, exit 0; no command at all: exit 2', async () => {
    for (const args of [['--help'], ['-h'], ['help']]) {
      const result = await runWorkbench(args, {}, cwd);
      expect(result.code, args.join(' ')).toBe(0);
      expect(result.stdout).toContain('usage: workbench <command> [options]');
      expect(result.stdout).toMatch(/^ {2}flags +list, set or seed/m);
      expect(result.stdout).toContain('workbench <command> --help');
    }
    const none = await runWorkbench([], {}, cwd);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain('usage: workbench <command>');
  });

  it.each([
    [['status', '--help'], 'usage: workbench status [--env E] [--json]', ['--env E', '--json']],
    [['status', '-h'], 'usage: workbench status', ['--env E']],
    [['help', 'status'], 'usage: workbench status', ['--env E']],
    [
      ['flags', 'set', '--help'],
      'workbench flags set KEY on|off|shadow --env E',
      ['--actor NAME', '--unleash-url URL'],
    ],
    [['up', '--help'], 'usage: workbench up', ['--env E', '--flags-phase N', '--lb haproxy|traefik']],
    [['promote', '--env', 'x', '-h'], 'usage: workbench promote', ['--actor NAME', '--json', '--junit FILE']],
    [['smoke', '--help'], 'usage: workbench smoke', ['--only CHECK,CHECK', '--junit FILE']],
  ])("%j: the command's own help with every option, exit 0, nothing run", async (args, first, options) => {
    const result = await runWorkbench(args, {}, cwd);
    expect(result.code, result.stderr).toBe(0);
    expect(result.stderr).toBe('');
    expect(result.stdout).toContain(first);
    for (const option of options) expect(result.stdout).toContain(option);
  });

  it('--version and -V print the package version', async () => {
    const { version } = JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8'));
    for (const flag of ['--version', '-V']) {
      const result = await runWorkbench([flag], {}, cwd);
      expect(result.code).toBe(0);
      expect(result.stdout.trim()).toBe(version);
    }
  });

  it("a usage error prints the command's help (not the global usage), exit 2", async () => {
    const result = await runWorkbench(['status', '--colour', 'red'], {}, cwd);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("Unknown option '--colour'");
    expect(result.stderr).toContain('usage: workbench status');
    expect(result.stderr).not.toContain('commands:');
  });
});

describe('status --json, wrong --env, down nodes', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase('cli_help');
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('status --json prints its errors as JSON on stdout with the exit code: no cluster (1), a bad option (2)', async () => {
    const none = await runWorkbench(['status', '--json'], {}, cwd);
    expect(none.code).toBe(1);
    expect(JSON.parse(none.stdout)).toEqual({
      error: expect.stringContaining('no local cluster here'),
      exitCode: 1,
    });
    expect(none.stderr).toBe('');
    const bad = await runWorkbench(['status', '--json', '--bogus'], {}, cwd);
    expect(bad.code).toBe(2);
    expect(JSON.parse(bad.stdout).error).toContain("Unknown option '--bogus'");
  });

  it('a wrong --env names the environments that exist (files in environments/, the local cluster)', async () => {
    const here = mkdtempSync(join(cwd, 'envs-'));
    for (const name of ['staging', 'prod']) writeEnvironmentFile(here, name, '{}');
    const status = await runWorkbench(['status', '--env', 'stagin'], {}, here);
    expect(status.code).toBe(1);
    expect(status.stderr).toContain('no environment "stagin"');
    expect(status.stderr).toContain('environments here: prod, staging (environments/)');
    expect(status.stderr).not.toContain('ENOENT');
    const flags = await runWorkbench(
      ['flags', 'list', '--env', 'stagin', '--database-url', db.url],
      {},
      here,
    );
    expect(flags.code).toBe(2);
    expect(flags.stderr).toContain('no environment "stagin"');
    expect(flags.stderr).toContain('prod, staging (environments/)');
    expect(flags.stderr).not.toContain('ENOENT');
  });

  it('a node that does not answer: health down, its flags unknown (never "as desired"); JSON: disagreements null', async () => {
    // A local cluster whose nodes are gone: ports nothing listens on, a real database and flags file.
    const here = mkdtempSync(join(cwd, 'down-'));
    mkdirSync(join(here, '.workbench', 'flags'), { recursive: true });
    writeFileSync(
      join(here, '.workbench', 'flags', 'local.json'),
      readFileSync(join(packageRoot(), 'flags', 'environments', 'local.json')),
    );
    const [lb, one, two] = [await freePort(), await freePort(), await freePort()];
    writeFileSync(
      join(here, '.workbench', 'cluster.json'),
      JSON.stringify({
        phase: 3,
        flagsEnv: 'local',
        flagsDir: join(here, '.workbench', 'flags'),
        lb: { url: `http://127.0.0.1:${lb}`, pid: 0, kind: 'haproxy' },
        nodes: [
          { id: 'broker-1', url: `http://127.0.0.1:${one}`, pid: 0 },
          { id: 'broker-2', url: `http://127.0.0.1:${two}`, pid: 0 },
        ],
        databaseUrl: db.url,
        adminToken: 'a-long-enough-admin-token',
        redisUrl: 'redis://127.0.0.1:6379',
        redisKeyPrefix: 'wbtest:cli-help:',
      }),
    );
    const text = await runWorkbench(['status'], {}, here);
    expect(text.code, text.stderr).toBe(1);
    expect(text.stdout).toMatch(/broker-1\s+down\s+background -\s+flags unknown/);
    expect(text.stdout).not.toContain('flags as desired');
    const json = await runWorkbench(['status', '--json'], {}, here);
    expect(json.code).toBe(1);
    const status = JSON.parse(json.stdout);
    expect(
      status.nodes.map((n: { health: string; disagreements: null }) => [n.health, n.disagreements]),
    ).toEqual([
      ['down', null],
      ['down', null],
    ]);
    // Another environment than the local cluster's: both named.
    const wrong = await runWorkbench(['status', '--env', 'prod'], {}, here);
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toContain('local (the local cluster)');
  });

  it('smoke and promote refuse a --junit file in a folder that does not exist, before running anything', async () => {
    for (const args of [
      ['smoke', '--phase', '3', '--junit', join(cwd, 'nowhere', 'smoke.xml')],
      ['promote', '--env', 'local', '--to', '1', '--junit', join(cwd, 'nowhere', 'promote.xml')],
    ]) {
      const result = await runWorkbench(args, {}, cwd);
      expect(result.code, args[0]).toBe(2);
      expect(result.stderr).toContain(`the folder ${join(cwd, 'nowhere')} does not exist`);
    }
  });
});

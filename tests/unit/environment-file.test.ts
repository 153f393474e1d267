import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { UsageError } from '../../cli/args.js';
import { loadEnvironmentFile, resolveEnvironment } from '../../cli/environments/environment.js';
import { writeEnvironmentFile } from '../helpers/environments.js';

const dir = mkdtempSync(join(tmpdir(), 'wb-environments-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const example = JSON.parse(
  readFileSync(join(import.meta.dirname, '../../environments/example.json'), 'utf8'),
);
const secrets = {
  STAGING_DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/none',
  STAGING_ADMIN_TOKEN: 't0ken',
  STAGING_UNLEASH_ADMIN_TOKEN: 'u',
};

const write = (name: string, content: unknown) => writeEnvironmentFile(dir, name, content);

function withSecrets<T>(run: () => T, values: Record<string, string> = secrets): T {
  const saved = Object.fromEntries(Object.keys(values).map((k) => [k, process.env[k]]));
  Object.assign(process.env, values);
  try {
    return run();
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

describe('environment files', () => {
  it('the shipped example loads: nodes, secrets from the named variables, the Unleash provider', () => {
    const environment = withSecrets(() => loadEnvironmentFile(write('staging', example), 'staging'));
    expect(environment.name).toBe('staging');
    expect(environment.target.nodes.map((n) => n.id)).toEqual(['broker-1', 'broker-2', 'broker-3']);
    expect(environment.target.adminToken).toBe('t0ken');
    expect(environment.target.databaseUrl).toBe(secrets.STAGING_DATABASE_URL);
    expect(environment.flags.describe).toContain('Unleash environment production');
    expect(environment.target.control).toBeDefined();
  });

  it('a secret whose variable is not set is named', () => {
    const path = write('staging', example);
    expect(() =>
      withSecrets(() => loadEnvironmentFile(path, 'staging'), { ...secrets, STAGING_ADMIN_TOKEN: '' }),
    ).toThrow('adminTokenEnv: the environment variable STAGING_ADMIN_TOKEN is not set');
  });

  it('every bad field is named, and a file that is not JSON says so', () => {
    const bad = {
      ...example,
      phase: 7,
      nodes: [{ id: 'broker 1', url: 'ftp://x' }],
      adminToken: 'written in the file',
      flags: { provider: 'consul' },
    };
    const path = write('bad', bad);
    let error: Error | undefined;
    try {
      loadEnvironmentFile(path, 'bad');
    } catch (caught) {
      error = caught as Error;
    }
    expect(error).toBeInstanceOf(UsageError);
    for (const field of ['phase', 'nodes.0.id', 'nodes.0.url', 'flags.provider', 'adminToken'])
      expect(error!.message).toContain(field);
    expect(() => loadEnvironmentFile(write('broken', '{"phase": '), 'broken')).toThrow('not valid JSON');
  });

  it('a file provider reads and writes the flags file next to the environment file', async () => {
    mkdirSync(join(dir, 'environments', 'flags'), { recursive: true });
    writeFileSync(join(dir, 'environments', 'flags', 'local-file.json'), '{"flags": {"ha.presence": true}}');
    const environment = withSecrets(() =>
      loadEnvironmentFile(
        write('local-file', { ...example, flags: { provider: 'file', dir: 'flags' } }),
        'local-file',
      ),
    );
    expect((await environment.flags.read())['ha.presence']).toBe(true);
    await environment.flags.write('ha.audit', true);
    expect((await environment.flags.read())['ha.audit']).toBe(true);
  });

  it('node control runs the environment commands with the node id, and reports a failing one', async () => {
    const log = join(dir, 'control.log');
    const control = {
      kill: `echo kill {node} >> ${log}`,
      stop: `echo stop {node} >> ${log}`,
      start: 'echo no such unit >&2; exit 3',
    };
    const environment = withSecrets(() =>
      loadEnvironmentFile(write('controlled', { ...example, control }), 'controlled'),
    );
    await environment.target.control!.kill('broker-2');
    await environment.target.control!.stop('broker-3');
    expect(readFileSync(log, 'utf8')).toBe('kill broker-2\nstop broker-3\n');
    await expect(environment.target.control!.start('broker-2')).rejects.toThrow(
      'exited with 3: no such unit',
    );
    await expect(environment.target.control!.kill('x; rm -rf /')).rejects.toThrow('bad node id');
  });

  it("push.clusterNodes: a Redis Cluster's seed nodes, written as REDIS_CLUSTER_NODES; a bad list is named", () => {
    const push = { ...example.push, clusterNodes: '10.0.1.21:7000, [::1]:7001' };
    const environment = withSecrets(() =>
      loadEnvironmentFile(write('sharded', { ...example, push }), 'sharded'),
    );
    expect(environment.push).toEqual({
      redisUrl: example.push.redisUrl,
      keyPrefix: 'mesh:',
      clusterNodes: [
        { host: '10.0.1.21', port: 7000 },
        { host: '::1', port: 7001 },
      ],
    });
    expect(
      withSecrets(() => loadEnvironmentFile(write('staging', example), 'staging')).push?.clusterNodes,
    ).toBe(undefined);
    for (const [clusterNodes, message] of [
      ['10.0.1.21:7000,', 'push.clusterNodes: entry 2 is empty'],
      ['redis://10.0.1.21:7000', 'push.clusterNodes: "redis://10.0.1.21:7000" has no valid host'],
      ['', 'push.clusterNodes: lists no node'],
      [['10.0.1.21:7000'], 'push.clusterNodes: Invalid input'],
    ] as const) {
      const path = write('bad-nodes', { ...example, push: { ...example.push, clusterNodes } });
      expect(() => withSecrets(() => loadEnvironmentFile(path, 'bad-nodes'))).toThrow(UsageError);
      expect(() => withSecrets(() => loadEnvironmentFile(path, 'bad-nodes'))).toThrow(message);
    }
  });

  it("the local cluster's push: its Redis Cluster when `workbench up` ran with REDIS_CLUSTER_NODES", () => {
    const cwd = join(dir, 'local-cluster');
    mkdirSync(join(cwd, '.workbench'), { recursive: true });
    const cluster = {
      phase: 3,
      topology: 3,
      lb: { url: 'http://127.0.0.1:1', pid: 0 },
      nodes: [],
      databaseUrl: secrets.STAGING_DATABASE_URL,
      redisUrl: 'redis://127.0.0.1:6379',
      redisKeyPrefix: 'wb:1234:',
      adminToken: 't',
      flagsEnv: 'phase3',
      flagsDir: join(cwd, '.workbench', 'flags'),
      brokerEnv: { REDIS_CLUSTER_NODES: '127.0.0.1:7000,127.0.0.1:7001' },
    };
    const file = join(cwd, '.workbench', 'cluster.json');
    writeFileSync(file, JSON.stringify(cluster));
    expect(resolveEnvironment(undefined, cwd).push).toEqual({
      redisUrl: 'redis://127.0.0.1:6379',
      keyPrefix: 'wb:1234:',
      clusterNodes: [
        { host: '127.0.0.1', port: 7000 },
        { host: '127.0.0.1', port: 7001 },
      ],
    });
    writeFileSync(file, JSON.stringify({ ...cluster, brokerEnv: {} }));
    expect(resolveEnvironment('phase3', cwd).push).toEqual({
      redisUrl: 'redis://127.0.0.1:6379',
      keyPrefix: 'wb:1234:',
      clusterNodes: undefined,
    });
  });

  it('--env resolution: a bad name, and an unknown environment with no local cluster here', () => {
    expect(() => resolveEnvironment('../etc', dir)).toThrow(UsageError);
    expect(() => resolveEnvironment('prod', dir)).toThrow('no environment "prod"');
    expect(() => resolveEnvironment(undefined, dir)).toThrow('no local cluster here');
  });
});

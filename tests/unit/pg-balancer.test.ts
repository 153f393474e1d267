/**
 * The database HAProxy of phase 4 (cli/cluster/regions/pg-balancer.ts): the configuration HAProxy itself
 * accepts (`haproxy -c`), writes routed by Patroni's `/primary` check with sessions cut when a server goes
 * down, reads by `/replica?lag=` on the region's own server with the leader as the fallback, and bad input
 * refused before anything is written. The routing itself, against real Patroni, is
 * tests/cluster/regions-patroni.test.ts.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type PgBalancerOptions, pgBalancerConfig } from '../../cli/cluster/regions/pg-balancer.js';

const options: PgBalancerOptions = {
  writeBind: '127.0.0.1:15001',
  readBind: '127.0.0.1:15002',
  region: 'b',
  readLagBytes: 1048576,
  checkIntervalMs: 500,
  servers: [
    { region: 'a', postgres: '127.0.0.1:16001', rest: '127.0.0.1:16002' },
    { region: 'b', postgres: '127.0.0.1:17001', rest: '127.0.0.1:17002' },
  ],
};

describe('pgBalancerConfig', () => {
  it('is a configuration HAProxy accepts', () => {
    const dir = mkdtempSync(join(tmpdir(), 'wb-pgb-'));
    try {
      const file = join(dir, 'pg.cfg');
      writeFileSync(file, pgBalancerConfig(options));
      const check = spawnSync('haproxy', ['-c', '-q', '-f', file], { encoding: 'utf8' });
      expect(check.status, check.stderr).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("routes writes by /primary, reads by /replica?lag= on the region's own server", () => {
    const text = pgBalancerConfig(options);
    const backend = (name: string) => text.split(`\nbackend ${name}\n`)[1]!.split('\nbackend ')[0]!;
    const primary = backend('primary');
    expect(primary).toContain('option httpchk GET /primary');
    expect(primary).toContain('http-check expect status 200');
    expect(primary).toContain('on-marked-down shutdown-sessions');
    expect(primary).toContain('server pg-a 127.0.0.1:16001 check addr 127.0.0.1 port 16002');
    expect(primary).toContain('server pg-b 127.0.0.1:17001 check addr 127.0.0.1 port 17002');
    const replica = backend('replica');
    expect(replica).toContain('option httpchk GET /replica?lag=1048576');
    expect(replica).toContain('server replica-b 127.0.0.1:17001 check addr 127.0.0.1 port 17002');
    expect(replica).not.toContain('replica-a');
    expect(replica).toContain('server leader-a 127.0.0.1:16001 backup track primary/pg-a');
  });

  it('refuses bad input', () => {
    expect(() => pgBalancerConfig({ ...options, region: 'c' })).toThrow(/no server of region "c"/);
    expect(() => pgBalancerConfig({ ...options, readLagBytes: -1 })).toThrow(/readLagBytes/);
    expect(() =>
      pgBalancerConfig({ ...options, servers: [{ region: 'b', postgres: 'db:5432', rest: '127.0.0.1:1' }] }),
    ).toThrow(/not a host:port address: "db:5432"/);
  });
});

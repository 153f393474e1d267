/**
 * `mesh_broker_build_info{version,commit,node}` (broker/build-info.ts, docs/observability.md § Build info): the
 * version is package.json's, the commit MESH_BUILD_COMMIT's or the BUILD_COMMIT stamp's, `unknown` otherwise
 * or when the value is not a commit hash.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildInfo } from '../../broker/build-info.js';
import { BrokerMetrics } from '../../broker/metrics.js';
import { packageRoot } from '../../broker/paths.js';

const dir = mkdtempSync(join(tmpdir(), 'wb-build-info-'));
writeFileSync(join(dir, 'package.json'), JSON.stringify({ version: '9.8.7' }));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('build info', () => {
  it("reads package.json's version and the commit from MESH_BUILD_COMMIT, else the stamp, else unknown", () => {
    expect(buildInfo({}, dir)).toEqual({ version: '9.8.7', commit: 'unknown' });
    expect(buildInfo({ MESH_BUILD_COMMIT: 'ABCDEF1234' }, dir).commit).toBe('abcdef1234');
    writeFileSync(join(dir, 'BUILD_COMMIT'), '0123456789abcdef0123456789abcdef01234567\n');
    expect(buildInfo({}, dir).commit).toBe('0123456789abcdef0123456789abcdef01234567');
    expect(buildInfo({ MESH_BUILD_COMMIT: 'fedcba9' }, dir).commit).toBe('fedcba9');
    // Not a commit: not trusted as one.
    expect(buildInfo({ MESH_BUILD_COMMIT: 'main; rm -rf' }, dir).commit).toBe('unknown');
    rmSync(join(dir, 'BUILD_COMMIT'));
  });

  it('is exported as mesh_broker_build_info 1 with version, commit and node', async () => {
    const metrics = new BrokerMetrics('n1', { version: '1.2.3', commit: 'abc1234' });
    const text = await metrics.registry.metrics();
    expect(text).toContain('mesh_broker_build_info{version="1.2.3",commit="abc1234",node="n1"} 1');
    const real = await new BrokerMetrics('n2').registry.metrics();
    const { version } = buildInfo({}, packageRoot());
    const line = real.split('\n').find((l) => l.startsWith('mesh_broker_build_info{'));
    expect(line).toMatch(
      /^mesh_broker_build_info\{version="[^"]+",commit="(?:[0-9a-f]{7,40}|unknown)",node="n2"\} 1$/,
    );
    expect(line).toContain(`version="${version}"`);
  });
});

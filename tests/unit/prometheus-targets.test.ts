/**
 * The local cluster's file_sd list (cli/cluster/prometheus-targets.ts, docs/observability.md § Environments
 * and clusters): every broker, labelled with the cluster's flags environment and `cluster: local`, one group
 * per region in phase 4; written with cluster.json (tests/cluster/lb.test.ts checks `up` and `down`).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import {
  prometheusTargets,
  prometheusTargetsPath,
  removePrometheusTargets,
  writePrometheusTargets,
} from '../../cli/cluster/prometheus-targets.js';

describe('the local cluster’s Prometheus targets', () => {
  it('labels every broker with the environment and cluster, one group per region', () => {
    expect(
      prometheusTargets({
        flagsEnv: 'phase3',
        nodes: [
          { id: 'broker-1', url: 'http://127.0.0.1:4001' },
          { id: 'broker-2', url: 'http://127.0.0.1:4002' },
        ],
      }),
    ).toEqual([
      { targets: ['127.0.0.1:4001', '127.0.0.1:4002'], labels: { environment: 'phase3', cluster: 'local' } },
    ]);
    expect(
      prometheusTargets({
        flagsEnv: 'phase4',
        nodes: [
          { id: 'a-1', url: 'http://127.0.0.1:5001', region: 'a' },
          { id: 'b-1', url: 'http://127.0.0.1:5002', region: 'b' },
          { id: 'a-2', url: 'http://127.0.0.1:5003', region: 'a' },
        ],
      }),
    ).toEqual([
      {
        targets: ['127.0.0.1:5001', '127.0.0.1:5003'],
        labels: { environment: 'phase4', cluster: 'local', region: 'a' },
      },
      { targets: ['127.0.0.1:5002'], labels: { environment: 'phase4', cluster: 'local', region: 'b' } },
    ]);
  });

  it('writes the list under .workbench/prometheus/ as YAML file_sd reads, and removes it', () => {
    const cwd = mkdtempSync(join(tmpdir(), 'wb-targets-'));
    try {
      writePrometheusTargets(cwd, {
        flagsEnv: 'staging',
        nodes: [{ id: 'b1', url: 'http://127.0.0.1:1234' }],
      });
      const path = prometheusTargetsPath(cwd);
      expect(path).toBe(join(cwd, '.workbench', 'prometheus', 'mesh-broker.yml'));
      expect(parse(readFileSync(path, 'utf8'))).toEqual([
        { targets: ['127.0.0.1:1234'], labels: { environment: 'staging', cluster: 'local' } },
      ]);
      removePrometheusTargets(cwd);
      expect(() => readFileSync(path)).toThrow();
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  });
});

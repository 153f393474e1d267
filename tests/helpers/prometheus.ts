/**
 * A throw-away `prometheus` (the Debian package, scripts/require-packages.sh) on a free loopback port, TSDB in
 * a temp folder, configured as the shipped dashboards/prometheus.yml is (its scrape jobs, their file_sd lists
 * and the relabelling that keeps only targets labelled with an environment and a cluster, its external
 * labels), with 1 s scrapes and evaluations, the shipped alert rules, and each job's file_sd list written here
 * from the groups given. Used by tests/cluster/prometheus.test.ts and tests/cluster/prometheus-environments.test.ts.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'yaml';
import { packageRoot } from '../../broker/paths.js';
import { alertRuleFiles } from './alert-rules.js';
import { freePort } from './ports.js';
import { waitFor } from './wait.js';

/** One file_sd group: targets (host:port) and the labels every series scraped from them gets. */
export interface TargetGroup {
  targets: string[];
  labels: Record<string, string>;
}

export interface TestPrometheus {
  url: string;
  /** An instant query; throws with Prometheus's error when it does not evaluate. */
  query(expr: string): Promise<Array<{ metric: Record<string, string>; value: [number, string] }>>;
  /** The alerts Prometheus holds now (pending and firing). */
  alerts(): Promise<
    Array<{ labels: Record<string, string>; annotations: Record<string, string>; state: string }>
  >;
  /** Rewrites a job's file_sd list (Prometheus rereads it within a second). */
  setTargets(job: string, groups: TargetGroup[]): void;
  log(): string;
  stop(): Promise<void>;
}

interface ScrapeConfig {
  job_name: string;
  file_sd_configs?: Array<{ files: string[]; refresh_interval?: string }>;
}

/** Starts it with `groups` per job name of dashboards/prometheus.yml (a job left out gets an empty list). */
export async function startPrometheus(groups: Record<string, TargetGroup[]>): Promise<TestPrometheus> {
  const dir = mkdtempSync(join(tmpdir(), 'wb-prometheus-'));
  const shipped = parse(readFileSync(join(packageRoot(), 'dashboards', 'prometheus.yml'), 'utf8')) as {
    global: Record<string, unknown>;
    scrape_configs: ScrapeConfig[];
  };
  const targetsFile = (job: string) => join(dir, `${job}.targets.yml`);
  const scrapeConfigs = shipped.scrape_configs.map((job) => {
    const file = targetsFile(job.job_name);
    writeFileSync(file, JSON.stringify(groups[job.job_name] ?? []));
    return { ...job, file_sd_configs: [{ files: [file], refresh_interval: '1s' }] };
  });
  const config = join(dir, 'prometheus.yml');
  writeFileSync(
    config,
    JSON.stringify({
      global: { ...shipped.global, scrape_interval: '1s', evaluation_interval: '1s' },
      rule_files: alertRuleFiles(),
      scrape_configs: scrapeConfigs,
    }),
  );
  const port = await freePort();
  const child = spawn(
    'prometheus',
    [
      `--config.file=${config}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let log = '';
  child.stdout!.on('data', (chunk) => {
    log += chunk;
  });
  child.stderr!.on('data', (chunk) => {
    log += chunk;
  });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitReady(child, url, () => log);
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    url,
    query: async (expr) => {
      const response = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(expr)}`);
      const body = (await response.json()) as {
        status: string;
        error?: string;
        data?: { result: unknown[] };
      };
      if (body.status !== 'success') throw new Error(`${expr}: ${body.error}`);
      return body.data!.result as Awaited<ReturnType<TestPrometheus['query']>>;
    },
    alerts: async () => {
      const body = (await (await fetch(`${url}/api/v1/alerts`)).json()) as {
        data: { alerts: Awaited<ReturnType<TestPrometheus['alerts']>> };
      };
      return body.data.alerts;
    },
    setTargets: (job, list) => {
      if (!shipped.scrape_configs.some((c) => c.job_name === job)) throw new Error(`no job ${job}`);
      const aside = `${targetsFile(job)}.tmp`;
      writeFileSync(aside, JSON.stringify(list));
      renameSync(aside, targetsFile(job));
    },
    log: () => log,
    stop,
  };
}

async function waitReady(child: ChildProcess, url: string, log: () => string): Promise<void> {
  await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`prometheus exited:\n${log()}`);
      return fetch(`${url}/-/ready`).then(
        (r) => r.ok,
        () => false,
      );
    },
    { timeoutMs: 20_000, what: 'prometheus ready' },
  );
}

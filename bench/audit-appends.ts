/**
 * Audit appends per second per mesh: the local writer (cached head) against the shared one (chain head
 * locked in each batch's transaction), for 1 and 10 meshes, each measured RUNS times; medians reported.
 * Runs against the machine's Postgres, in a database of its own that it drops afterwards.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { pino } from 'pino';
import type { AuditLog } from '../broker/audit/audit.js';
import { LocalAuditLog } from '../broker/audit/audit.local.js';
import { SharedAuditLog } from '../broker/audit/audit.shared.js';
import { runMigrations } from '../broker/db/migrate.js';
import { createPool } from '../broker/db/pool.js';

const SERVER = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

export interface AuditBenchResult {
  writer: 'local' | 'shared';
  meshes: number;
  entriesPerMesh: number;
  perMeshPerSecond: number[];
  medianPerMeshPerSecond: number;
  medianTotalPerSecond: number;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

async function once(writer: AuditLog, meshes: number, entries: number): Promise<number> {
  const ids = Array.from({ length: meshes }, () => randomUUID());
  const started = process.hrtime.bigint();
  for (let i = 0; i < entries; i++) {
    for (const meshId of ids) writer.record({ meshId, eventType: 'bench', actor: null, payload: { i } });
  }
  await writer.flush();
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return entries / seconds; // per mesh
}

export async function benchAuditAppends(options: {
  runs: number;
  entries: number;
}): Promise<AuditBenchResult[]> {
  const name = `wb_bench_audit_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: SERVER });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const url = SERVER.replace(/\/[^/]*$/, `/${name}`);
  const pool = createPool(url, { max: 10 });
  const log = pino({ level: 'silent' });
  const counters = { appended: () => {}, failed: () => {} };
  const results: AuditBenchResult[] = [];
  try {
    await runMigrations(url);
    for (const meshes of [1, 10]) {
      for (const writer of ['local', 'shared'] as const) {
        const rates: number[] = [];
        for (let run = 0; run < options.runs; run++) {
          const log_ =
            writer === 'local'
              ? new LocalAuditLog(pool, log, counters)
              : new SharedAuditLog(pool, log, counters);
          rates.push(await once(log_, meshes, Math.ceil(options.entries / meshes)));
        }
        const perMesh = median(rates);
        results.push({
          writer,
          meshes,
          entriesPerMesh: Math.ceil(options.entries / meshes),
          perMeshPerSecond: rates.map(Math.round),
          medianPerMeshPerSecond: Math.round(perMesh),
          medianTotalPerSecond: Math.round(perMesh * meshes),
        });
      }
    }
  } finally {
    await pool.end();
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  }
  return results;
}

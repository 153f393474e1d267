/**
 * CPU time of processes from /proc/<pid>/stat (Linux): utime + stime (fields 14 and 15, after the command
 * name in parentheses, which may itself hold spaces), in clock ticks of `getconf CLK_TCK` (normally 100,
 * so 10 ms resolution: measure windows of a second or more).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

let ticksPerSecond: number | undefined;

/** Clock ticks per second (`getconf CLK_TCK`; 100 if it cannot be asked). */
export function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

/** utime + stime of one process, in clock ticks (0 when it is gone). */
export function cpuTicks(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // fields[0] is field 3 (state), so utime (14) and stime (15) are at 11 and 12.
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return 0;
  }
}

/** CPU seconds used by `pids` between now and the returned function's call. */
export function cpuMeter(pids: number[]): () => number {
  const before = pids.map(cpuTicks);
  return () => pids.reduce((sum, pid, i) => sum + cpuTicks(pid) - before[i]!, 0) / clockTicks();
}

/** The pids of the Postgres backends serving `databaseUrl` now (the brokers' pool connections). */
export async function postgresBackends(databaseUrl: string): Promise<number[]> {
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const rows = await client.query<{ pid: number }>(
      'SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
    );
    return rows.rows.map((r) => r.pid);
  } finally {
    await client.end();
  }
}

/**
 * The active lease as the database shows it (`cluster_leases`, docs/design.md), sampled through the run:
 * a claim by another node always comes with a higher epoch (the fence the lease's holders are judged by),
 * and the epoch never goes back. Judged from the rows, not from what a broker says of itself. In phase 3
 * nothing else in the run depends on the lease (every background row is shared), so without this a
 * lease taken without its epoch would pass unseen (docs/chaos.md § Planted bugs).
 */
import type { Pool } from '../../broker/db/pool.js';
import type { Property } from './verify.js';

/** How often the row is read: the lease's rounds are every 500 ms (ttl 2 s / 4). */
const SAMPLE_MS = 100;
const MAX_PROBLEMS = 10;

export interface LeaseSample {
  holder: string;
  epoch: number;
}

export class LeaseWatch {
  private timer: NodeJS.Timeout | undefined;
  private reading = false;
  private last: LeaseSample | undefined;
  samples = 0;
  changes = 0;
  readonly problems: string[] = [];
  private violations = 0;

  /** Reads the row every SAMPLE_MS from now on. */
  static start(pool: Pool): LeaseWatch {
    const watch = new LeaseWatch();
    watch.timer = setInterval(() => void watch.sample(pool), SAMPLE_MS);
    return watch;
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private async sample(pool: Pool): Promise<void> {
    if (this.reading) return;
    this.reading = true;
    try {
      const result = await pool.query<LeaseSample>(
        "SELECT holder, epoch::int AS epoch FROM cluster_leases WHERE name = 'active'",
      );
      if (result.rows[0]) this.observe(result.rows[0]);
    } catch {
      // Postgres restarting or cut: the next sample reads again.
    } finally {
      this.reading = false;
    }
  }

  /** One reading of the row, judged against the one before. */
  observe(now: LeaseSample): void {
    this.samples++;
    const before = this.last;
    this.last = now;
    if (!before || (before.holder === now.holder && before.epoch === now.epoch)) return;
    if (before.holder !== now.holder) this.changes++;
    const wrong = now.epoch < before.epoch || (before.holder !== now.holder && now.epoch <= before.epoch);
    if (!wrong) return;
    this.violations++;
    if (this.problems.length < MAX_PROBLEMS)
      this.problems.push(
        `${before.holder} (epoch ${before.epoch}) then ${now.holder} (epoch ${now.epoch}): ${now.epoch < before.epoch ? 'the epoch went back' : 'another holder without a new epoch'}`,
      );
  }

  property(): Property {
    const problems = this.samples === 0 ? ['the lease row was never read'] : this.problems;
    return {
      name: 'lease-epochs',
      ok: problems.length === 0,
      summary: `${this.samples} samples of the active lease, ${this.changes} changes of holder, ${this.violations} without a new epoch`,
      problems,
    };
  }
}

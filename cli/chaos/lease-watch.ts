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

interface Sample {
  holder: string;
  epoch: number;
}

export class LeaseWatch {
  private readonly timer: NodeJS.Timeout;
  private reading = false;
  private last: Sample | undefined;
  samples = 0;
  changes = 0;
  readonly problems: string[] = [];
  private violations = 0;

  constructor(private readonly pool: Pool) {
    this.timer = setInterval(() => void this.sample(), SAMPLE_MS);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private async sample(): Promise<void> {
    if (this.reading) return;
    this.reading = true;
    try {
      const result = await this.pool.query<Sample>(
        "SELECT holder, epoch::int AS epoch FROM cluster_leases WHERE name = 'active'",
      );
      const now = result.rows[0];
      if (!now) return;
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
    } catch {
      // Postgres restarting or cut: the next sample reads again.
    } finally {
      this.reading = false;
    }
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

import type { Pool } from '../db/pool.js';
import type { Logger } from '../log.js';
import type { BrokerMetrics } from '../metrics.js';
import { planted } from '../plants.js';
import { PeriodicTask } from '../timing/periodic.js';
import type { BackgroundGate } from './background-gate.js';

const LEASE = 'active';

export interface ActiveLeaseOptions {
  pool: Pool;
  nodeId: string;
  /** How long a claim lasts; renewed every quarter of it. Bound on a standby's takeover after a kill. */
  ttlMs: number;
  log: Logger;
  /** Counts every change of this node's hold (`mesh_broker_active_lease_transitions_total`). */
  metrics: BrokerMetrics;
}

/**
 * The cluster's active lease (flag `ha.active-lease`): one row, claimed with one atomic upsert that only
 * succeeds if the lease is free, expired, or already this node's; renewed every ttl/4. A node trusts its
 * claim only for half the lease after each renewal, so a node that cannot renew (database
 * unreachable, process stalled) stops its background work before anybody else can take over. Drain gives
 * the lease up at once, so the standby takes over without waiting for the expiry.
 */
export class ActiveLease implements BackgroundGate {
  private readonly listeners: Array<(active: boolean) => void> = [];
  /** Claims and renewals: every quarter of the lease, one at a time. */
  private readonly rounds: PeriodicTask;
  private trustedUntil = 0;
  private active = false;
  /** Fires when the trust of the last claim runs out, even if the next round hangs on the database. */
  private trustTimer: NodeJS.Timeout | undefined;

  constructor(private readonly options: ActiveLeaseOptions) {
    this.rounds = new PeriodicTask({
      everyMs: Math.max(50, options.ttlMs / 4),
      run: () => this.claim(),
      onError: { log: options.log, message: 'active lease round failed' },
    });
  }

  isActive(): boolean {
    return this.active && Date.now() < this.trustedUntil;
  }

  onChange(listener: (active: boolean) => void): void {
    this.listeners.push(listener);
  }

  /** Starts claiming and renewing the lease (the first round is awaited). */
  async activate(): Promise<void> {
    this.rounds.start();
    await this.rounds.runNow();
  }

  /** Gives the lease up at once, so a standby takes over without waiting for the expiry. */
  async deactivate(): Promise<void> {
    const inFlight = this.rounds.stop();
    clearTimeout(this.trustTimer);
    await inFlight;
    if (this.active) {
      await this.options.pool
        .query('UPDATE cluster_leases SET expires_at = now() WHERE name = $1 AND holder = $2', [
          LEASE,
          this.options.nodeId,
        ])
        .catch((error) => this.options.log.warn({ err: error }, 'could not give the active lease up'));
    }
    this.set(false);
  }

  async close(): Promise<void> {}

  private async claim(): Promise<void> {
    const { pool, nodeId, ttlMs, log } = this.options;
    const startedAt = Date.now();
    // PLANTED BUG (tests only): the claim takes the lease whoever holds it, and keeps the old epoch.
    const unfenced = planted('lease-no-epoch');
    try {
      const result = await pool.query<{ holder: string; epoch: number }>(
        `INSERT INTO cluster_leases (name, holder, epoch, expires_at)
         VALUES ($1, $2, 1, now() + make_interval(secs => $3 / 1000.0))
         ON CONFLICT (name) DO UPDATE
           SET epoch = CASE WHEN cluster_leases.holder = excluded.holder ${unfenced ? 'OR true' : ''} THEN cluster_leases.epoch
                            ELSE cluster_leases.epoch + 1 END,
               holder = excluded.holder, expires_at = excluded.expires_at
           WHERE cluster_leases.holder = excluded.holder OR cluster_leases.expires_at < now() ${unfenced ? 'OR true' : ''}
         RETURNING holder, epoch`,
        [LEASE, nodeId, ttlMs],
      );
      const mine = result.rows[0]?.holder === nodeId;
      // Trusted for half the lease from before the claim was sent: with rounds every quarter, a node that
      // stops renewing notices within three quarters, before the lease expires for the others.
      if (mine) {
        this.trustedUntil = startedAt + ttlMs / 2;
        clearTimeout(this.trustTimer);
        this.trustTimer = setTimeout(
          () => this.set(this.isActive()),
          Math.max(0, this.trustedUntil - Date.now()) + 1,
        );
        this.trustTimer.unref();
      }
      if (mine && !this.active) log.info({ epoch: result.rows[0]?.epoch }, 'holding the active lease');
      this.set(mine);
    } catch (error) {
      log.warn({ err: error }, 'active lease round failed');
      this.set(this.isActive());
    }
  }

  private set(active: boolean): void {
    if (active === this.active) return;
    this.active = active;
    this.options.metrics.activeLeaseTransitions.inc({ to: active ? 'holder' : 'standby' });
    for (const listener of this.listeners) listener(active);
  }
}

/**
 * What the console shows, gathered in one place: every second it asks each node of the local cluster for
 * /health, /flags and /metrics, and Postgres for the phase and ownership (chain integrity every few
 * seconds: it walks whole chains; the timeline of flag changes and promotions every two), the promotion's
 * activity (lock, pause, analysis: cli/promotion/activity.ts) and each node's shadow agreement
 * (/admin/shadow) every poll. Each poll adds
 * one sample to the rate history the plots draw. The page reads the latest snapshot; one poller serves
 * any number of open pages, so neither the nodes nor Postgres are asked more often when more people look.
 */
import type { Pool } from '../../broker/db/pool.js';
import type { FlagsAccess } from '../../flags/access.js';
import { FLAGS, type FlagKey } from '../../flags/registry.js';
import type { ClusterFile } from '../cluster/local.js';
import { type Chains, type Ownership, readChains, readOwnership } from '../cluster/ownership.js';
import { readShadowAgreement, type ShadowAgreement } from '../cluster/shadow-agreement.js';
import { type PromotionActivity, readPromotionActivity } from '../promotion/activity.js';
import { currentPhase } from '../promotion/promote.js';
import { clusterSample, RateHistory, type RateHistoryView } from './history.js';
import { type NodeInterval, type Rates, RateTracker } from './rates.js';
import { readTimeline, type TimelineEntry } from './timeline.js';

/** A node that has not answered within this is shown down (a hung node must not stall the page). */
const NODE_TIMEOUT_MS = 800;
const CHAINS_EVERY_MS = 5000;
const TIMELINE_EVERY_MS = 2000;
/** The plots' window: this many polls (5 minutes at one a second). */
export const HISTORY_SAMPLES = 300;

export interface NodeView {
  id: string;
  url: string;
  /** `ok`, the node's own non-ok status (e.g. draining), or `down` when it did not answer. */
  health: string;
  backgroundWork: string;
  /** flag → what the node acts on; empty when down. */
  flags: Partial<Record<FlagKey, { value: boolean; acting: boolean }>>;
  /** Per second between the last two scrapes; undefined until two scrapes in a row succeeded. */
  rates?: Rates;
}

export interface FlagView {
  key: FlagKey;
  phase: number;
  row: string;
  /** The value in the provider (the cluster's flags file). */
  desired: boolean;
  /** True when a live node acts otherwise than desired or than another live node. */
  disagree: boolean;
}

export interface Snapshot {
  at: string;
  phase: number | null;
  environment: string;
  loadBalancer: string;
  nodes: NodeView[];
  flags: FlagView[];
  ownership: Ownership | null;
  chains: Chains | null;
  rates: Rates;
  /** The cluster's rates of the last minutes, one sample per poll (oldest first). */
  history: RateHistoryView;
  /** Flag changes, promotions and smoke runs of the environment, newest first (the newest TIMELINE_LIMIT). */
  timeline: TimelineEntry[] | null;
  /** The promotion lock, a pause, the current or last analysis (null: the database did not answer). */
  promotion: PromotionActivity | null;
  /** Shadow agreement per row over the live nodes (null: never asked yet). */
  shadow: ShadowAgreement | null;
  /** Why part of the snapshot is missing (the database did not answer, the flags file is unreadable). */
  errors: string[];
}

async function getJson<T>(url: string): Promise<T> {
  const response = await fetch(url, { signal: AbortSignal.timeout(NODE_TIMEOUT_MS) });
  return (await response.json()) as T;
}

async function getText(url: string): Promise<string> {
  return (await fetch(url, { signal: AbortSignal.timeout(NODE_TIMEOUT_MS) })).text();
}

export class ClusterWatcher {
  private readonly rates = new RateTracker();
  private readonly history: RateHistory;
  private latest: Snapshot | undefined;
  private chains: { at: number; value: Chains } | undefined;
  private timeline: { at: number; value: TimelineEntry[] } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly cluster: ClusterFile,
    private readonly pool: Pool,
    private readonly flags: FlagsAccess,
    private readonly intervalMs = 1000,
  ) {
    this.history = new RateHistory(HISTORY_SAMPLES, intervalMs);
  }

  /** Polls now and then every interval; a poll still running when the next is due is not doubled. */
  start(): Promise<void> {
    this.timer = setInterval(() => {
      if (!this.running) this.running = this.poll().finally(() => (this.running = undefined));
    }, this.intervalMs);
    this.running = this.poll().finally(() => (this.running = undefined));
    return this.running;
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }

  snapshot(): Snapshot | undefined {
    return this.latest;
  }

  /** Polls at once (after a flag flip, so the page sees it without waiting for the next tick). */
  async refresh(): Promise<void> {
    await this.running;
    this.timeline = undefined; // the change just made belongs on the timeline now
    this.running = this.poll().finally(() => (this.running = undefined));
    await this.running;
  }

  private async poll(): Promise<void> {
    const errors: string[] = [];
    const [polled, desired, database, timeline, promotion, shadow] = await Promise.all([
      Promise.all(this.cluster.nodes.map((node) => this.node(node))),
      this.flags.read().catch((error: Error) => {
        errors.push(`flags file: ${error.message}`);
        return undefined;
      }),
      this.database().catch((error: Error) => {
        errors.push(`database: ${error.message}`);
        return undefined;
      }),
      this.recentChanges().catch((error: Error) => {
        errors.push(`timeline: ${error.message}`);
        return undefined;
      }),
      readPromotionActivity(this.pool, this.cluster.flagsEnv).catch((error: Error) => {
        errors.push(`promotion: ${error.message}`);
        return null;
      }),
      // In memory on each node: cheap enough to ask every poll, so a shadow's counts move as they happen.
      readShadowAgreement(this.cluster.nodes, this.cluster.adminToken, NODE_TIMEOUT_MS),
    ]);
    const nodes = polled.map(({ view }) => view);
    this.history.add(
      clusterSample(
        Date.now(),
        polled.map(({ interval }) => interval),
      ),
    );
    const live = nodes.filter((node) => node.health !== 'down');
    const flags: FlagView[] = FLAGS.map((flag) => {
      const acting = live.map((node) => node.flags[flag.key]?.acting);
      const want = desired?.[flag.key] ?? flag.default;
      return {
        key: flag.key,
        phase: flag.phase,
        row: flag.row,
        desired: want,
        disagree: acting.some((value) => value !== acting[0] || (desired !== undefined && value !== want)),
      };
    });
    const rates = { accepted: 0, delivered: 0, streamPublishes: 0 };
    for (const node of live) {
      for (const key of Object.keys(rates) as Array<keyof Rates>) rates[key] += node.rates?.[key] ?? 0;
    }
    this.latest = {
      at: new Date().toISOString(),
      phase: database?.phase ?? null,
      environment: this.cluster.flagsEnv,
      loadBalancer: this.cluster.lb.url,
      nodes,
      flags,
      ownership: database?.ownership ?? null,
      chains: database?.chains ?? this.chains?.value ?? null,
      rates,
      history: this.history.view(),
      timeline: timeline ?? this.timeline?.value ?? null,
      promotion,
      shadow,
      errors,
    };
  }

  private async node(node: {
    id: string;
    url: string;
  }): Promise<{ view: NodeView; interval?: NodeInterval }> {
    try {
      const [health, flags, metrics] = await Promise.all([
        getJson<{ status: string; backgroundWork: string }>(`${node.url}/health`),
        getJson<{ flags: NodeView['flags'] }>(`${node.url}/flags`),
        getText(`${node.url}/metrics`),
      ]);
      const interval = this.rates.observe(node.id, metrics, Date.now());
      const view: NodeView = {
        id: node.id,
        url: node.url,
        health: health.status,
        backgroundWork: health.backgroundWork,
        flags: flags.flags,
        rates: interval?.rates,
      };
      return { view, interval };
    } catch {
      this.rates.forget(node.id);
      return { view: { id: node.id, url: node.url, health: 'down', backgroundWork: '-', flags: {} } };
    }
  }

  private async database() {
    const [phase, ownership] = await Promise.all([
      currentPhase(this.pool, this.cluster.flagsEnv, this.cluster.phase),
      readOwnership(this.pool),
    ]);
    if (!this.chains || Date.now() - this.chains.at >= CHAINS_EVERY_MS) {
      this.chains = { at: Date.now(), value: await readChains(this.pool) };
    }
    return { phase, ownership, chains: this.chains.value };
  }

  private async recentChanges(): Promise<TimelineEntry[]> {
    if (!this.timeline || Date.now() - this.timeline.at >= TIMELINE_EVERY_MS) {
      this.timeline = { at: Date.now(), value: await readTimeline(this.pool, this.cluster.flagsEnv) };
    }
    return this.timeline.value;
  }
}

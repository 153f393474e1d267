/**
 * What the console shows, gathered in one place: every second it asks each node of the local cluster for
 * /health, /flags and /metrics, and Postgres for the phase and ownership (chain integrity every few
 * seconds: it walks whole chains). The page reads the latest snapshot; one poller serves any number of
 * open pages, so the nodes are not asked more often when more people look.
 */
import type { Pool } from '../../broker/db/pool.js';
import type { FlagsAccess } from '../../flags/access.js';
import { FLAGS, type FlagKey } from '../../flags/registry.js';
import type { ClusterFile } from '../cluster/local.js';
import { type Chains, type Ownership, readChains, readOwnership } from '../cluster/ownership.js';
import { currentPhase } from '../promotion/promote.js';
import { type Rates, RateTracker } from './rates.js';

/** A node that has not answered within this is shown down (a hung node must not stall the page). */
const NODE_TIMEOUT_MS = 800;
const CHAINS_EVERY_MS = 5000;

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
  private latest: Snapshot | undefined;
  private chains: { at: number; value: Chains } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly cluster: ClusterFile,
    private readonly pool: Pool,
    private readonly flags: FlagsAccess,
    private readonly intervalMs = 1000,
  ) {}

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
    this.running = this.poll().finally(() => (this.running = undefined));
    await this.running;
  }

  private async poll(): Promise<void> {
    const errors: string[] = [];
    const [nodes, desired, database] = await Promise.all([
      Promise.all(this.cluster.nodes.map((node) => this.node(node))),
      this.flags.read().catch((error: Error) => {
        errors.push(`flags file: ${error.message}`);
        return undefined;
      }),
      this.database().catch((error: Error) => {
        errors.push(`database: ${error.message}`);
        return undefined;
      }),
    ]);
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
      errors,
    };
  }

  private async node(node: { id: string; url: string }): Promise<NodeView> {
    try {
      const [health, flags, metrics] = await Promise.all([
        getJson<{ status: string; backgroundWork: string }>(`${node.url}/health`),
        getJson<{ flags: NodeView['flags'] }>(`${node.url}/flags`),
        getText(`${node.url}/metrics`),
      ]);
      return {
        id: node.id,
        url: node.url,
        health: health.status,
        backgroundWork: health.backgroundWork,
        flags: flags.flags,
        rates: this.rates.observe(node.id, metrics, Date.now()),
      };
    } catch {
      this.rates.forget(node.id);
      return { id: node.id, url: node.url, health: 'down', backgroundWork: '-', flags: {} };
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
}

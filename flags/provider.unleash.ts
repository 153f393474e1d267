import { EventEmitter } from 'node:events';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type ClientFeaturesResponse, Unleash, type UnleashConfig } from 'unleash-client';
import type { FlagProvider, FlagSnapshot, ProviderStatus } from './provider.js';
import { FLAG_KEYS, type FlagKey, type FlagValues, parseFlagMode } from './registry.js';
import { fetchClientFeatures } from './unleash-client-api.js';
import { unleashApiRoot } from './unleash-url.js';

export interface UnleashProviderOptions {
  /** The API root or the server root (`http://unleash:4242/api` or `http://unleash:4242`). */
  url: string;
  /**
   * A backend (client) token. It decides which Unleash environment the node reads: Unleash serves a
   * backend token the flags of the one environment it was made for. Optional against a server with
   * authentication off.
   */
  token: string | undefined;
  /** The deployment environment (FLAGS_ENV): the `environment` field of the evaluation context. */
  environment: string;
  nodeId: string;
  refreshMs: number;
  /** Where the provider keeps its backup of the last fetched flags: the project's state folder. */
  backupDir: string;
  /** The environment's flags file values: what a node acts on before (or without) Unleash. */
  bootstrap: FlagValues;
}

const APP_NAME = 'mesh-broker';
/** The backup's name (the one unleash-client used before the provider polled by itself). */
const BACKUP_FILE = `unleash-backup-${APP_NAME}.json`;
/** How long `start` waits for a first answer from Unleash before going on with bootstrap values. */
const START_WAIT_MS = 3000;
/** One read may take this long before it counts as unreachable. */
const FETCH_TIMEOUT_MS = 10_000;
/** After failures the poll backs off, doubling up to this many refresh intervals, and never stops. */
const MAX_BACKOFF_FACTOR = 8;

/** The poll's delay after `failures` failed reads in a row. */
export function pollDelay(refreshMs: number, failures: number): number {
  return refreshMs * Math.min(2 ** failures, MAX_BACKOFF_FACTOR);
}

/**
 * The flag definitions unleash-client evaluates, held by the provider: the SDK's documented `repository`
 * option, so the SDK does the evaluation (strategies, constraints, segments) and the provider the fetching.
 */
class FeatureStore extends EventEmitter {
  private features = new Map<string, ClientFeaturesResponse['features'][number]>();
  private segments = new Map<number, NonNullable<ClientFeaturesResponse['segments']>[number]>();

  replace(response: ClientFeaturesResponse): void {
    this.features = new Map(response.features.map((feature) => [feature.name, feature]));
    this.segments = new Map((response.segments ?? []).map((segment) => [segment.id, segment]));
  }

  content(): ClientFeaturesResponse {
    return { version: 2, features: [...this.features.values()], segments: [...this.segments.values()] };
  }

  getToggle(name: string) {
    return this.features.get(name);
  }
  getToggles() {
    return [...this.features.values()];
  }
  getTogglesWithSegmentData() {
    return this.getToggles().map((feature) => ({
      ...feature,
      strategies: feature.strategies?.map(({ segments, ...strategy }) => ({
        ...strategy,
        segments: segments?.map((id) => this.segments.get(id)).filter((s) => s !== undefined),
      })),
    }));
  }
  getSegment(id: number) {
    return this.segments.get(id);
  }
  async start(): Promise<void> {
    this.emit('ready');
  }
  stop(): void {}
}

/**
 * Flags from an Unleash server, bootstrapped from the environment's file so a node never starts with
 * everything off. A flag the server does not define keeps the file's value. Each flag is evaluated with
 * the context `{environment, userId: nodeId, properties: {nodeId}}`, so a flexibleRollout on `nodeId`
 * (or on the default stickiness) is a per-node canary.
 *
 * The provider polls the client API itself, with backoff after failures, and never stops: a node whose
 * token is refused (401/403) reports `unauthorized` and recovers by itself once the token is valid.
 */
export class UnleashFlagProvider implements FlagProvider {
  readonly kind = 'unleash';
  private readonly store = new FeatureStore();
  private readonly client: Unleash;
  private readonly apiRoot: string;
  private snapshot: FlagSnapshot;
  private readonly listeners: Array<(snapshot: FlagSnapshot) => void> = [];
  private fallbackSource: 'bootstrap' | 'backup' = 'bootstrap';
  private fromServer = false;
  private etag: string | undefined;
  private failures = 0;
  private timer: NodeJS.Timeout | undefined;
  /** Reads run one at a time, in order (a push's read waits for the poll in flight). */
  private reading: Promise<void> = Promise.resolve();
  private readonly closing = new AbortController();

  constructor(private readonly options: UnleashProviderOptions) {
    this.apiRoot = unleashApiRoot(options.url);
    this.snapshot = {
      values: options.bootstrap,
      source: 'bootstrap',
      fetchedAt: new Date(),
      error: undefined,
      status: 'ok',
    };
    this.client = new Unleash({
      appName: APP_NAME,
      instanceId: options.nodeId,
      url: this.apiRoot,
      environment: options.environment,
      disableMetrics: true,
      disableAutoStart: true,
      skipInstanceCountWarning: true,
      repository: this.store as unknown as NonNullable<UnleashConfig['repository']>,
    });
    // The SDK reports evaluation problems as errors; the node's report carries the provider's own.
    this.client.on('error', () => {});
  }

  async start(): Promise<void> {
    const { options } = this;
    mkdirSync(options.backupDir, { recursive: true });
    this.loadBackup();
    await this.client.start();
    this.publish(undefined, 'ok');
    const first = this.refresh();
    const answered = await Promise.race([
      first.then(() => true),
      new Promise<false>((resolve) => setTimeout(() => resolve(false), START_WAIT_MS).unref()),
    ]);
    // Still no answer (a read hanging on a silent host): the node runs on its fallback values and says why.
    if (!answered) this.publish(`Unleash did not answer within ${START_WAIT_MS} ms`, 'unreachable');
  }

  current(): FlagSnapshot {
    return this.snapshot;
  }

  /** Reads now (the push path); the poll goes on from this read. */
  refresh(): Promise<void> {
    const read = this.reading.then(() => this.readOnce());
    this.reading = read.catch(() => {}); // one failed read must not block the ones after it
    return read;
  }

  onSnapshot(listener: (snapshot: FlagSnapshot) => void): void {
    this.listeners.push(listener);
  }

  async close(): Promise<void> {
    this.closing.abort();
    clearTimeout(this.timer);
    await this.reading;
    this.client.destroy();
  }

  /** One read, and the next one scheduled whatever happens: the poll must never stop. */
  private async readOnce(): Promise<void> {
    if (this.closing.signal.aborted) return;
    try {
      await this.readAndPublish();
    } catch (error) {
      this.failures += 1;
      this.publish(`reading Unleash failed: ${(error as Error).message}`, 'error');
    } finally {
      if (!this.closing.signal.aborted) this.schedule(pollDelay(this.options.refreshMs, this.failures));
    }
  }

  private async readAndPublish(): Promise<void> {
    const outcome = await fetchClientFeatures({
      apiRoot: this.apiRoot,
      token: this.options.token,
      appName: APP_NAME,
      instanceId: this.options.nodeId,
      etag: this.fromServer ? this.etag : undefined,
      timeoutMs: FETCH_TIMEOUT_MS,
      signal: this.closing.signal,
    });
    if (this.closing.signal.aborted) return;
    if (outcome.kind === 'features' || outcome.kind === 'unchanged') {
      if (outcome.kind === 'features') {
        this.store.replace(outcome.response);
        this.etag = outcome.etag;
        this.saveBackup();
      }
      this.fromServer = true;
      this.failures = 0;
      this.publish(undefined, 'ok');
    } else {
      this.failures += 1;
      this.publish(outcome.message, outcome.kind);
    }
  }

  private schedule(delay: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.refresh().catch(() => {});
    }, delay);
    this.timer.unref();
  }

  /** A backup from an earlier run: the node acts on what Unleash last said until it answers again. */
  private loadBackup(): void {
    let text: string;
    try {
      text = readFileSync(join(this.options.backupDir, BACKUP_FILE), 'utf8');
    } catch {
      return; // no backup: the bootstrap values it is
    }
    try {
      const backup = JSON.parse(text) as ClientFeaturesResponse;
      if (!Array.isArray(backup.features)) return;
      this.store.replace(backup);
      this.fallbackSource = 'backup';
    } catch {
      // an unreadable backup is ignored: the bootstrap values it is
    }
  }

  /** Written atomically (write then rename): a node killed mid-write keeps the previous backup. */
  private saveBackup(): void {
    const path = join(this.options.backupDir, BACKUP_FILE);
    const temporary = `${path}.${process.pid}.tmp`;
    try {
      writeFileSync(temporary, JSON.stringify(this.store.content()));
      renameSync(temporary, path);
    } catch {
      // a backup that cannot be written only costs the next start its head start
    }
  }

  private publish(error: string | undefined, status: ProviderStatus): void {
    const read = this.evaluate();
    // A variant naming no flag value is a bad definition: the last good values stay, the error is said.
    if (read.problems.length > 0) {
      error = [error, ...read.problems].filter(Boolean).join('; ');
      status = status === 'ok' ? 'error' : status;
    }
    const { values, shadow } = read.problems.length > 0 ? this.snapshot : read;
    const source = this.fromServer ? 'unleash' : this.fallbackSource;
    const fetchedAt = error ? this.snapshot.fetchedAt : new Date();
    this.snapshot = { values, shadow: shadow ?? [], source, fetchedAt, error, status };
    for (const listener of this.listeners) listener(this.snapshot);
  }

  /**
   * Each flag for this node: enabled or not, and an enabled flag's variant (the SDK picks it per node)
   * says its value: none (or `on`) is on, `shadow` is shadow, `off` is off; any other name is a problem.
   */
  private evaluate(): { values: FlagValues; shadow: FlagKey[]; problems: string[] } {
    const context = {
      environment: this.options.environment,
      userId: this.options.nodeId,
      properties: { nodeId: this.options.nodeId },
    };
    const values = { ...this.options.bootstrap };
    const shadow: FlagKey[] = [];
    const problems: string[] = [];
    for (const key of FLAG_KEYS) {
      const enabled = this.client.isEnabled(key, context, this.options.bootstrap[key]);
      const variant = enabled ? this.client.getVariant(key, context) : undefined;
      const name = variant?.enabled ? variant.name : 'on';
      const mode = enabled ? parseFlagMode(name) : 'off';
      if (mode === undefined)
        problems.push(`flag "${key}" has variant "${name}": its variants must be "on", "off" or "shadow"`);
      values[key] = mode === 'on';
      if (mode === 'shadow') shadow.push(key);
    }
    return { values, shadow, problems };
  }
}

import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Unleash, UnleashEvents } from 'unleash-client';
import type { FlagProvider, FlagSnapshot } from './provider.js';
import { FLAG_KEYS, type FlagValues } from './registry.js';

export interface UnleashProviderOptions {
  url: string;
  /** Client API token (optional against a server with authentication off). */
  token: string | undefined;
  environment: string;
  nodeId: string;
  refreshMs: number;
  /** Where the SDK keeps its backup of the last fetched flags: the project's state folder. */
  backupDir: string;
  /** The environment's flags file values: what a node acts on before (or without) Unleash. */
  bootstrap: FlagValues;
}

const APP_NAME = 'mesh-broker';
/** How long `start` waits for a first answer from Unleash before going on with bootstrap values. */
const START_WAIT_MS = 3000;

/**
 * Flags from an Unleash server through unleash-client 6, bootstrapped from the environment's file so a
 * node never starts with everything off. A flag the server does not define keeps the file's value. Each flag is evaluated with the context
 * `{environment, userId: nodeId, properties: {nodeId}}`, so a flexibleRollout on `nodeId` (or on the
 * default stickiness) is a per-node canary.
 */
export class UnleashFlagProvider implements FlagProvider {
  readonly kind = 'unleash';
  private client: Unleash | undefined;
  private snapshot: FlagSnapshot;
  private readonly listeners: Array<(snapshot: FlagSnapshot) => void> = [];
  private fallbackSource: 'bootstrap' | 'backup' = 'bootstrap';

  constructor(private readonly options: UnleashProviderOptions) {
    this.snapshot = {
      values: options.bootstrap,
      source: 'bootstrap',
      fetchedAt: new Date(),
      error: undefined,
    };
  }

  async start(): Promise<void> {
    const { options } = this;
    mkdirSync(options.backupDir, { recursive: true });
    if (existsSync(join(options.backupDir, `unleash-backup-${APP_NAME}.json`)))
      this.fallbackSource = 'backup';
    const client = new Unleash({
      appName: APP_NAME,
      instanceId: options.nodeId,
      url: options.url,
      environment: options.environment,
      refreshInterval: options.refreshMs,
      disableMetrics: true,
      skipInstanceCountWarning: true,
      backupPath: options.backupDir,
      customHeaders: options.token ? { Authorization: options.token } : undefined,
      bootstrap: {
        data: FLAG_KEYS.map((key) => ({
          name: key,
          enabled: options.bootstrap[key],
          strategies: [{ name: 'default', parameters: {}, constraints: [] }],
          variants: [],
          type: 'release',
          project: 'default',
          stale: false,
        })),
      },
    });
    this.client = client;
    client.on(UnleashEvents.Error, (error: Error) => this.publish(error.message));
    client.on(UnleashEvents.Synchronized, () => this.publish(undefined));
    client.on(UnleashEvents.Changed, () => this.publish(undefined));
    client.on(UnleashEvents.Unchanged, () => this.publish(undefined));
    // Wait for the first answer from the server (data, "unchanged" or an error), not for the bootstrap.
    let answered = false;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        // No answer at all (the client's fetch failed without an error event, seen with a refused port):
        // the node runs on its fallback values and must say why.
        if (!answered && !this.repository()?.connected)
          this.snapshot = { ...this.snapshot, error: `Unleash did not answer within ${START_WAIT_MS} ms` };
        done();
      }, START_WAIT_MS);
      const onChanged = () => {
        if (this.repository()?.connected) done();
      };
      function done() {
        answered = true;
        clearTimeout(timer);
        client.off(UnleashEvents.Changed, onChanged);
        client.off(UnleashEvents.Error, done);
        client.off(UnleashEvents.Unchanged, done);
        resolve();
      }
      client.on(UnleashEvents.Changed, onChanged);
      client.on(UnleashEvents.Error, done);
      client.on(UnleashEvents.Unchanged, done);
    });
    this.publish(this.snapshot.error);
  }

  current(): FlagSnapshot {
    return this.snapshot;
  }

  /**
   * Fetches now instead of at the next poll. unleash-client 6 has no public "fetch now", so this uses
   * its repository's fetch (pinned version; the poll remains the backstop if that ever goes away).
   */
  async refresh(): Promise<void> {
    const repository = this.repository();
    if (typeof repository?.fetch === 'function') await repository.fetch();
  }

  /**
   * The SDK's repository, for what its public API lacks: "fetch now", and whether the data came from the
   * server (the SDK's own `isSynchronized` is also true after loading the bootstrap). Pinned SDK version.
   */
  private repository(): { fetch?: () => Promise<void>; connected?: boolean } | undefined {
    return (this.client as unknown as { repository?: { fetch?: () => Promise<void>; connected?: boolean } })
      ?.repository;
  }

  onSnapshot(listener: (snapshot: FlagSnapshot) => void): void {
    this.listeners.push(listener);
  }

  async close(): Promise<void> {
    this.client?.destroy();
  }

  private publish(error: string | undefined): void {
    const client = this.client;
    if (!client) return;
    const context = {
      environment: this.options.environment,
      userId: this.options.nodeId,
      properties: { nodeId: this.options.nodeId },
    };
    const values = Object.fromEntries(
      FLAG_KEYS.map((key) => [key, client.isEnabled(key, context, this.options.bootstrap[key])]),
    ) as FlagValues;
    const source = this.repository()?.connected ? 'unleash' : this.fallbackSource;
    this.snapshot = { values, source, fetchedAt: error ? this.snapshot.fetchedAt : new Date(), error };
    for (const listener of this.listeners) listener(this.snapshot);
  }
}

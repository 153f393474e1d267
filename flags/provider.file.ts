import { type FSWatcher, readFile, watch } from 'node:fs';
import { basename, dirname } from 'node:path';
import { parseFlagsDocument } from './document.js';
import type { FlagProvider, FlagSnapshot } from './provider.js';
import { defaultFlagValues } from './registry.js';

/**
 * The environment's flags file, the embedded default provider. Re-read when the folder changes
 * (fs.watch, which sees atomic replaces), on a poll as a backstop, and on `refresh`. A malformed file or
 * an unknown entry is reported and the last good values stay in force.
 */
export class FileFlagProvider implements FlagProvider {
  readonly kind = 'file';
  private snapshot: FlagSnapshot = {
    values: defaultFlagValues(),
    source: 'default',
    fetchedAt: new Date(),
    error: undefined,
  };
  private readonly listeners: Array<(snapshot: FlagSnapshot) => void> = [];
  private watcher: FSWatcher | undefined;
  private poller: NodeJS.Timeout | undefined;
  private reading: Promise<void> | undefined;

  constructor(
    private readonly path: string,
    private readonly pollMs: number,
  ) {}

  async start(): Promise<void> {
    await this.refresh();
    try {
      this.watcher = watch(dirname(this.path), (_event, name) => {
        if (name === null || name === basename(this.path)) void this.refresh();
      });
      this.watcher.on('error', () => {}); // the poll still covers us
    } catch {
      // no watch support: the poll is enough
    }
    this.poller = setInterval(() => void this.refresh(), this.pollMs);
    this.poller.unref();
  }

  current(): FlagSnapshot {
    return this.snapshot;
  }

  /** One read at a time; a refresh asked for during a read waits for it and reads again. */
  refresh(): Promise<void> {
    const previous = this.reading ?? Promise.resolve();
    const next = previous.then(() => this.read());
    this.reading = next.finally(() => {
      if (this.reading === next) this.reading = undefined;
    });
    return next;
  }

  onSnapshot(listener: (snapshot: FlagSnapshot) => void): void {
    this.listeners.push(listener);
  }

  async close(): Promise<void> {
    this.watcher?.close();
    if (this.poller) clearInterval(this.poller);
  }

  private async read(): Promise<void> {
    const text = await new Promise<string | Error>((resolve) =>
      readFile(this.path, 'utf8', (error, data) => resolve(error ?? data)),
    );
    const parsed = typeof text === 'string' ? parseFlagsDocument(text) : undefined;
    if (parsed?.values) {
      this.snapshot = {
        values: parsed.values,
        shadow: parsed.shadow,
        source: 'file',
        fetchedAt: new Date(),
        error: undefined,
      };
    } else {
      const error = typeof text === 'string' ? parsed!.problems.join('; ') : text.message;
      this.snapshot = { ...this.snapshot, error: `${this.path}: ${error}` };
    }
    for (const listener of this.listeners) listener(this.snapshot);
  }
}

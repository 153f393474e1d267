/**
 * Writes a history (format.ts) as the run goes: events are buffered and written in batches, so recording
 * costs the workloads a string push, and the buffer is bounded (`FLUSH_BYTES`: past it the batch is written
 * at once, synchronously). A write that fails (disk full, the file gone) stops the recording and is kept:
 * `close()` throws it, so the run that asked for a history fails clearly instead of leaving a history
 * with a hole that a checker would read as lost operations.
 */
import { closeSync, openSync, writeSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import type { NewEvent } from './format.js';

/** Written when the buffer holds this much (and every FLUSH_MS): the most the writer holds in memory. */
const FLUSH_BYTES = 256 * 1024;
const FLUSH_MS = 250;
/** An event line larger than this is a recording bug (values are a few ids): refused, the run fails. */
const MAX_LINE_BYTES = 64 * 1024;

export class HistoryWriter {
  private readonly fd: number;
  private readonly started = performance.now();
  private buffer: string[] = [];
  private bytes = 0;
  private next = 0;
  private error: Error | undefined;
  private closed = false;
  private readonly timer: ReturnType<typeof setInterval>;

  /** Creates (or truncates) the file now, so a path that cannot be written fails before the run starts. */
  constructor(readonly path: string) {
    try {
      this.fd = openSync(path, 'w');
    } catch (error) {
      throw new Error(`cannot write the history ${path}: ${(error as Error).message}`);
    }
    this.timer = setInterval(() => this.flush(), FLUSH_MS);
    this.timer.unref();
  }

  /** Events recorded so far. */
  get count(): number {
    return this.next;
  }

  /** Appends one event, stamped with the time since the writer was created and the next index. */
  record(event: NewEvent): void {
    if (this.error || this.closed) return;
    const time = Math.round((performance.now() - this.started) * 1000) / 1000;
    const line = `${JSON.stringify({ ...event, time, index: this.next })}\n`;
    if (line.length > MAX_LINE_BYTES) {
      this.error = new Error(`history event ${this.next} (${event.f}) is over ${MAX_LINE_BYTES} bytes`);
      return;
    }
    this.next++;
    this.buffer.push(line);
    this.bytes += line.length;
    if (this.bytes >= FLUSH_BYTES) this.flush();
  }

  /** Writes what is buffered; an error is kept for `close()` and stops the recording. */
  flush(): void {
    if (this.error || this.buffer.length === 0) return;
    const chunk = Buffer.from(this.buffer.join(''));
    this.buffer = [];
    this.bytes = 0;
    try {
      let offset = 0;
      while (offset < chunk.length) offset += writeSync(this.fd, chunk, offset);
    } catch (error) {
      this.error = new Error(`writing the history ${this.path} failed: ${(error as Error).message}`);
    }
  }

  /** Flushes and closes the file; throws if any write failed (the history is incomplete). */
  close(): void {
    if (this.closed) {
      if (this.error) throw this.error;
      return;
    }
    this.flush();
    this.closed = true;
    clearInterval(this.timer);
    try {
      closeSync(this.fd);
    } catch (error) {
      this.error ??= new Error(`closing the history ${this.path} failed: ${(error as Error).message}`);
    }
    if (this.error) throw this.error;
  }
}

/** What the workloads take: a writer, or nothing (no `--history`). */
export type Recorder = Pick<HistoryWriter, 'record'> | undefined;

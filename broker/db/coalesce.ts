/**
 * One statement for many callers (issue 26 item 5). When a drain moves thousands of sessions here at once,
 * every session's start would ask Postgres the same question about its own session id. A Coalescer gathers
 * the calls that arrive in the same tick, or while its statement is in flight, and answers them all with
 * the next statement (written over `= ANY($1)` or `unnest`).
 *
 * Sessions of a drain reach their start a few milliseconds apart (each hello costs CPU), longer than a
 * local statement takes: gathering only while one is in flight would send nearly one statement each. So
 * during a burst a batch starts at most every `burstMs`: a call `burstMs` or more after the last batch
 * started (one resume alone) waits a tick only; a call sooner waits for the rest of the window.
 *
 * One statement at a time: whatever arrives meanwhile waits for it and goes in the next. If the statement
 * fails, every caller of that batch gets the error (each would have failed the same way alone).
 */
export interface CoalescerOptions<I, O> {
  /** Answers a batch in one statement: one result per input, in order. */
  run: (inputs: I[]) => Promise<O[]>;
  /** Inputs per statement at most (a bound on its parameters); the rest wait for the next. */
  maxBatch: number;
  /** During a burst, the least time between two batches' starts (default BURST_MS). */
  burstMs?: number;
}

/** What a session's start waits at most, per coalesced hook, while sessions arrive together. */
export const BURST_MS = 50;

interface Waiting<I, O> {
  input: I;
  resolve: (value: O) => void;
  reject: (error: unknown) => void;
}

export class Coalescer<I, O> {
  private waiting: Array<Waiting<I, O>> = [];
  /** A batch is scheduled or in flight: new calls join the next one. */
  private busy = false;
  /** When the last batch started (performance.now()); a burst is batches closer than `burstMs`. */
  private lastStart = Number.NEGATIVE_INFINITY;

  constructor(private readonly options: CoalescerOptions<I, O>) {}

  submit(input: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.waiting.push({ input, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.busy || this.waiting.length === 0) return;
    this.busy = true;
    // At least a tick's wait: the calls made in this turn of the event loop go into the same statement.
    // The statement is labelled with the context of the call that scheduled it (db/round-trips.ts).
    const run = () => {
      this.lastStart = performance.now();
      void this.flush().finally(() => {
        this.busy = false;
        this.schedule();
      });
    };
    const wait = this.lastStart + (this.options.burstMs ?? BURST_MS) - performance.now();
    if (wait > 0) setTimeout(run, wait);
    else setImmediate(run);
  }

  private async flush(): Promise<void> {
    const batch = this.waiting.splice(0, this.options.maxBatch);
    let results: O[];
    try {
      results = await this.options.run(batch.map((waiting) => waiting.input));
    } catch (error) {
      for (const waiting of batch) waiting.reject(error);
      return;
    }
    batch.forEach((waiting, i) => {
      if (i < results.length) waiting.resolve(results[i] as O);
      else waiting.reject(new Error('coalescer: no result for an input'));
    });
  }
}

/**
 * Group commit: requests from every session of a node are gathered and written in one transaction per
 * batch. A batch starts as soon as a request arrives and fewer than `maxInFlight` batches are being written;
 * whatever arrives while batches are being written goes into the next one (up to `maxBatch`). So one
 * request alone is written at once, and under load batches grow by themselves with the commit time: no
 * timer stands between a request and its commit.
 *
 * Each request gets its own outcome: `write` returns one result or error per request, in order, so one bad
 * request does not fail the others. If the whole batch fails (the database unreachable), every request of
 * it fails with that error.
 *
 * Order: requests of one batch are written in arrival order; a caller that must keep order across its
 * requests (one socket's sends) waits for each before making the next, as the gateway does.
 *
 * `burstMs` is for requests that come a few milliseconds apart rather than together, as the session starts of
 * a drain's thousands of resumes do (each hello costs CPU first): gathering only while a batch is in flight
 * would write nearly one batch each. With it, batches start at most every `burstMs`: a request `burstMs` or
 * more after the last batch started (one resume alone) is written at once, one sooner waits for the rest of
 * the window with the others that arrive meanwhile.
 */
export type Outcome<O> = { ok: true; value: O } | { ok: false; error: unknown };

/** Each value a success: for a batch that succeeds or fails as a whole. */
export function allOk<O>(values: O[]): Array<Outcome<O>> {
  return values.map((value) => ({ ok: true, value }));
}

/**
 * Writes a batch as rounds in which no key occurs twice (a multi-row upsert may not touch one row twice:
 * two hellos of one session id in a batch), one round after another, each request in the round after the
 * one that holds its key's previous request: per key, arrival order. One round when the keys are distinct
 * (the usual case). A round that fails fails its own requests only; the rounds before it stay written.
 */
export async function inDistinctRounds<I, O>(
  batch: I[],
  key: (request: I) => string,
  write: (round: I[]) => Promise<O[]>,
): Promise<Array<Outcome<O>>> {
  const rounds: number[][] = [];
  const roundOfKey = new Map<string, number>();
  batch.forEach((request, i) => {
    const round = (roundOfKey.get(key(request)) ?? -1) + 1;
    roundOfKey.set(key(request), round);
    if (round === rounds.length) rounds.push([]);
    rounds[round]!.push(i);
  });
  const outcomes = new Array<Outcome<O>>(batch.length);
  for (const round of rounds) {
    try {
      const values = await write(round.map((i) => batch[i]!));
      round.forEach((i, j) => {
        outcomes[i] = { ok: true, value: values[j]! };
      });
    } catch (error) {
      for (const i of round) outcomes[i] = { ok: false, error };
    }
  }
  return outcomes;
}

/**
 * The `burstMs` of the rows' session-start statements (stream subscriptions, MCP hosting): what a session's
 * start waits at most, per statement, while a drain's sessions resume together.
 */
export const SESSION_START_BURST_MS = 50;

/**
 * The `burstMs` of a resume's own statements, shared by the hellos and sessions arriving together (issue 26
 * item 5): the hello's member lookup and binding, the shared presence takeover, the feed's first read (the
 * backlog). Each such statement waits at most this long while a drain's sessions resume together; one
 * resume alone (none in the window before it) waits nothing.
 */
export const RESUME_BURST_MS = SESSION_START_BURST_MS;

export interface GroupCommitOptions<I, O> {
  /** Writes a batch in one transaction; one outcome per request, in order. */
  write: (batch: I[]) => Promise<Array<Outcome<O>>>;
  maxBatch: number;
  maxInFlight: number;
  /** The least time between two batches' starts (none: a batch starts whenever one may). */
  burstMs?: number;
  /** Called with each batch's size (a histogram of batch sizes). */
  onBatch?: (size: number) => void;
}

interface Pending<I, O> {
  request: I;
  resolve: (value: O) => void;
  reject: (error: unknown) => void;
}

export class GroupCommit<I, O> {
  private queue: Array<Pending<I, O>> = [];
  private inFlight = 0;
  /** When the last batch started (performance.now()), and the timer of a `burstMs` window being waited out. */
  private lastStart = Number.NEGATIVE_INFINITY;
  private windowTimer: NodeJS.Timeout | undefined;

  constructor(private readonly options: GroupCommitOptions<I, O>) {}

  submit(request: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ request, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.queue.length > 0 && this.inFlight < this.options.maxInFlight) {
      const wait = this.lastStart + (this.options.burstMs ?? 0) - performance.now();
      if (wait > 0) {
        this.windowTimer ??= setTimeout(() => {
          this.windowTimer = undefined;
          this.pump();
        }, wait);
        return;
      }
      this.lastStart = performance.now();
      const batch = this.queue.splice(0, this.options.maxBatch);
      this.inFlight++;
      void this.run(batch).finally(() => {
        this.inFlight--;
        this.pump();
      });
    }
  }

  private async run(batch: Array<Pending<I, O>>): Promise<void> {
    this.options.onBatch?.(batch.length);
    let outcomes: Array<Outcome<O>>;
    try {
      outcomes = await this.options.write(batch.map((pending) => pending.request));
    } catch (error) {
      for (const pending of batch) pending.reject(error);
      return;
    }
    batch.forEach((pending, i) => {
      const outcome = outcomes[i];
      if (!outcome) pending.reject(new Error('group commit: no outcome for a request'));
      else if (outcome.ok) pending.resolve(outcome.value);
      else pending.reject(outcome.error);
    });
  }
}

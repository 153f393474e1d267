/**
 * A drain's closes, paced (DRAIN_CLOSE_PER_SEC): closing every socket of a node at once sends all of its
 * sessions to the other nodes in the same instant, and each of them resumes (admission, presence, backlog)
 * against the same Postgres. A node holding thousands of sessions then makes the nodes taking them over
 * queue thousands of hellos, and the last ones wait many times what a single resume takes (bench/RESULTS.md
 * § h). Closing them at a bounded rate lets the others keep up; the drain's own deadline still bounds it.
 */

/** How often a batch of closes goes out: 20 batches a second keep each batch small. */
const BATCH_EVERY_MS = 50;

/**
 * Closes `items` at most `perSecond` a second (0: all at once), but fast enough to have closed all of them
 * within `withinMs` (what is still open then is closed at once). Resolves when every one is closed.
 */
export async function closePaced<T>(
  items: readonly T[],
  close: (item: T) => void,
  perSecond: number,
  withinMs: number,
): Promise<void> {
  const batches = Math.floor(withinMs / BATCH_EVERY_MS);
  if (perSecond === 0 || batches <= 1 || items.length <= perSecond * (BATCH_EVERY_MS / 1000)) {
    for (const item of items) close(item);
    return;
  }
  const perBatch = Math.max(
    Math.ceil((perSecond * BATCH_EVERY_MS) / 1000),
    Math.ceil(items.length / batches),
  );
  for (let next = 0; next < items.length; next += perBatch) {
    if (next > 0) await new Promise((resolve) => setTimeout(resolve, BATCH_EVERY_MS));
    for (const item of items.slice(next, next + perBatch)) close(item);
  }
}

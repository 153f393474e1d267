/**
 * List replies bounded by construction: a page holds entries, in their order, up to LIST_PAGE_MAX_BYTES of
 * JSON (always at least one, so paging moves on), and says where it stopped. Every list whose entries a
 * member makes large or many is paged this way: `schedule.list`, `peers.list` and `audit.query` from
 * arrays (fillByBytes), `mcp.list` from a lazy source (broker/mcp/page.ts), all through one BytePage.
 */

/**
 * Below V8's large-object size (about 128 KiB): a reply is then short-lived young garbage, not old-space
 * memory that grows the node's RSS until a full collection (measured with `workbench fuzz --abuse
 * amplification`: peaks of +21 to +79 MiB with 256 KiB pages, +5 to +39 MiB with 64 KiB pages).
 */
export const LIST_PAGE_MAX_BYTES = 64 * 1024;
/** Room kept for the envelope around the entries: type, `next` (≤ 64 characters), `rid` (≤ 128). */
export const PAGE_ENVELOPE_BYTES = 1024;

/** Bytes of one entry's JSON in a list (the comma before it included). */
export function entryBytes(entry: unknown): number {
  return Buffer.byteLength(JSON.stringify(entry)) + 1;
}

/** One page being filled: takes entries while they fit the byte budget and the count. */
export class BytePage<T> {
  readonly entries: T[] = [];
  private bytes = PAGE_ENVELOPE_BYTES;

  constructor(private readonly limit = Number.POSITIVE_INFINITY) {}

  /**
   * Adds `entry` when it fits; false when the page is full (the entry is left for the next page). The
   * first entry is always taken, so a page is never empty while entries remain.
   */
  offer(entry: T, size = entryBytes(entry)): boolean {
    if (
      this.entries.length > 0 &&
      (this.entries.length >= this.limit || this.bytes + size > LIST_PAGE_MAX_BYTES)
    )
      return false;
    this.entries.push(entry);
    this.bytes += size;
    return true;
  }
}

/** The leading entries of `sorted` that fit one page; `last` is set when some were left for the next. */
export function fillByBytes<T>(sorted: Iterable<T>): { entries: T[]; last?: T } {
  const page = new BytePage<T>();
  for (const entry of sorted) {
    if (!page.offer(entry)) return { entries: page.entries, last: page.entries.at(-1) };
  }
  return { entries: page.entries };
}

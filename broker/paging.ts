/**
 * List replies bounded by construction: a page holds entries, in their order, up to LIST_PAGE_MAX_BYTES of
 * JSON (always at least one, so paging moves on), and says where it stopped. Used by the lists whose
 * entries a member makes large or many (`schedule.list`, `peers.list`); `mcp.list` (broker/mcp/page.ts)
 * and `audit.query` bound theirs the same way from lazy sources.
 */
/** Below V8's large-object size, like MCP pages (broker/mcp/page.ts): a page is young garbage. */
export const LIST_PAGE_MAX_BYTES = 64 * 1024;
/** Room kept for the envelope around the entries: type, `next`, `rid`. */
const ENVELOPE_BYTES = 1024;

/** The leading entries of `sorted` that fit one page; `last` is set when some were left for the next. */
export function fillByBytes<T>(sorted: T[]): { entries: T[]; last?: T } {
  const entries: T[] = [];
  let bytes = ENVELOPE_BYTES;
  for (const entry of sorted) {
    bytes += Buffer.byteLength(JSON.stringify(entry)) + 1;
    if (entries.length > 0 && bytes > LIST_PAGE_MAX_BYTES) return { entries, last: entries.at(-1) };
    entries.push(entry);
  }
  return { entries };
}

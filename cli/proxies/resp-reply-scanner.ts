/**
 * The server → client half of the lossy Redis proxy (lossy-redis-proxy.ts): a RESP scanner (RESP2 and
 * RESP3) that finds where each top-level reply ends in the bytes Redis sends, across chunks, without holding
 * any of them, so the proxy can count the replies Redis owes and insert its own at a frame boundary.
 * Pushes (`>`) and attributes (`|`) are not counted as replies. No sockets here: it only sees buffers.
 */
const LF = 0x0a;

type ReplyPhase = 'type' | 'line' | 'bulk';
/** RESP2 and RESP3 type bytes: one-line values, length-prefixed values, and aggregates. */
const LINE_TYPES = new Set([0x2b, 0x2d, 0x3a, 0x5f, 0x2c, 0x23, 0x28]); // + - : _ , # (
const BULK_TYPES = new Set([0x24, 0x21, 0x3d]); // $ ! =
const ARRAY_TYPES = new Set([0x2a, 0x7e, 0x3e]); // * ~ >
const MAP = 0x25; // %
const ATTRIBUTE = 0x7c; // |
const PUSH = 0x3e; // >

/** How scanning goes on after a step: on, stopped by the caller, or not RESP. */
type Scan = 'on' | 'stop' | 'bad';

/**
 * The server → client side: finds where each top-level reply ends in the stream of bytes Redis sends,
 * across chunks, without holding any of them. Push frames (`>`) and attributes (`|`) are not replies.
 */
export class ReplyScanner {
  private phase: ReplyPhase = 'type';
  private readonly stack: Array<{ left: number; attribute: boolean }> = [];
  private lineType = 0;
  private line = '';
  private bulkLeft = 0;
  private topIsPush = false;
  /** A top-level attribute was read: the reply it belongs to comes next. */
  private pendingAttribute = false;

  /** Between two top-level replies (where a reply of the proxy's own may go). */
  get atBoundary(): boolean {
    return this.phase === 'type' && this.stack.length === 0 && !this.pendingAttribute;
  }

  /**
   * Calls `frame(end, counted)` for each top-level frame that ends in `chunk` (`end` just past it;
   * `counted` false for a push); stops when `frame` returns false. Returns false on bytes that are not RESP.
   */
  scan(chunk: Buffer, frame: (end: number, counted: boolean) => boolean): boolean {
    let i = 0;
    while (i < chunk.length) {
      let next: Scan = 'on';
      if (this.phase === 'type') {
        const t = chunk[i++]!;
        if (this.stack.length === 0) this.topIsPush = t === PUSH;
        if (!LINE_TYPES.has(t) && !BULK_TYPES.has(t) && !ARRAY_TYPES.has(t) && t !== MAP && t !== ATTRIBUTE)
          return false;
        this.lineType = t;
        this.line = '';
        this.phase = 'line';
      } else if (this.phase === 'line') {
        const lf = chunk.indexOf(LF, i);
        const end = lf === -1 ? chunk.length : lf;
        // Only lengths are read; a one-line value (`+OK`, an error) is just skipped to its newline.
        if (!LINE_TYPES.has(this.lineType)) {
          this.line += chunk.toString('latin1', i, end);
          if (this.line.length > 24) return false;
        }
        if (lf === -1) return true;
        i = lf + 1;
        this.phase = 'type';
        next = this.lineDone(i, frame);
      } else {
        const n = Math.min(this.bulkLeft, chunk.length - i);
        i += n;
        this.bulkLeft -= n;
        if (this.bulkLeft === 0) {
          this.phase = 'type';
          next = this.elementDone(i, frame);
        }
      }
      if (next === 'stop') return true;
      if (next === 'bad') return false;
    }
    return true;
  }

  /** A header or one-line value ended at `end`. */
  private lineDone(end: number, frame: (end: number, counted: boolean) => boolean): Scan {
    const t = this.lineType;
    if (LINE_TYPES.has(t)) return this.elementDone(end, frame);
    const text = this.line.endsWith('\r') ? this.line.slice(0, -1) : this.line;
    if (!/^-?[0-9]+$/.test(text)) return 'bad';
    const n = Number(text);
    if (BULK_TYPES.has(t)) {
      if (n < 0) return this.elementDone(end, frame); // a null
      this.bulkLeft = n + 2;
      this.phase = 'bulk';
      return 'on';
    }
    const entries = t === MAP || t === ATTRIBUTE ? 2 * n : n;
    if (entries > 0) {
      this.stack.push({ left: entries, attribute: t === ATTRIBUTE });
      return 'on';
    }
    if (t !== ATTRIBUTE) return this.elementDone(end, frame); // an empty aggregate, or a null one
    if (this.stack.length === 0) this.pendingAttribute = true;
    return 'on';
  }

  /** A value ended at `end`: it completes its aggregates, and maybe a top-level frame. */
  private elementDone(end: number, frame: (end: number, counted: boolean) => boolean): Scan {
    while (this.stack.length > 0) {
      const top = this.stack[this.stack.length - 1]!;
      if (--top.left > 0) return 'on';
      this.stack.pop();
      if (top.attribute) {
        // An attribute is not a value of its aggregate: the value it describes follows.
        if (this.stack.length === 0) this.pendingAttribute = true;
        return 'on';
      }
    }
    this.pendingAttribute = false;
    return frame(end, !this.topIsPush) ? 'on' : 'stop';
  }
}

/**
 * Shadow agreement per row across an environment's nodes (docs/flags.md § Shadow), for the console and
 * `workbench status`: each node's GET /admin/shadow (admin token), summed per flag (agree, disagree, error,
 * skipped, the ratio over the sum) with the latest mismatches of every node merged, newest first, each
 * naming its node. A row is listed when some node compares it or has compared it since it started (the
 * rows with a comparator that nobody shadows are noise). A node that does not answer is named, not counted.
 */
import type { ShadowReport } from '../../broker/shadow/runner.js';
import type { ShadowMismatch } from '../../broker/shadow/shadow.js';

/** The mismatches shown per row (each node keeps its last 50). */
export const SHADOW_MISMATCHES_SHOWN = 10;

export interface ShadowRowView {
  flag: string;
  /** The nodes comparing it now. */
  runningOn: string[];
  agree: number;
  disagree: number;
  error: number;
  skipped: number;
  /** agree ÷ (agree + disagree + error) over every node; null before the first comparison. */
  agreementRatio: number | null;
  /** Newest first, at most SHADOW_MISMATCHES_SHOWN. */
  mismatches: Array<ShadowMismatch & { node: string }>;
}

export interface ShadowAgreement {
  rows: ShadowRowView[];
  /** The nodes whose /admin/shadow did not answer, and why. */
  unanswered: Array<{ node: string; error: string }>;
}

export async function readShadowAgreement(
  nodes: ReadonlyArray<{ id: string; url: string }>,
  adminToken: string,
  timeoutMs: number,
): Promise<ShadowAgreement> {
  const answers = await Promise.all(
    nodes.map(async (node) => {
      try {
        const response = await fetch(`${node.url}/admin/shadow`, {
          headers: { authorization: `Bearer ${adminToken}` },
          signal: AbortSignal.timeout(timeoutMs),
        });
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        const { rows } = (await response.json()) as { rows: ShadowReport[] };
        return { node: node.id, rows };
      } catch (error) {
        return { node: node.id, error: (error as Error).message };
      }
    }),
  );
  return mergeShadowReports(answers);
}

export function mergeShadowReports(
  answers: ReadonlyArray<{ node: string; rows?: ShadowReport[]; error?: string }>,
): ShadowAgreement {
  const byFlag = new Map<string, ShadowRowView>();
  const unanswered: ShadowAgreement['unanswered'] = [];
  for (const answer of answers) {
    if (!answer.rows) {
      unanswered.push({ node: answer.node, error: answer.error ?? 'no answer' });
      continue;
    }
    for (const report of answer.rows) {
      let row = byFlag.get(report.flag);
      if (!row) {
        row = {
          flag: report.flag,
          runningOn: [],
          agree: 0,
          disagree: 0,
          error: 0,
          skipped: 0,
          agreementRatio: null,
          mismatches: [],
        };
        byFlag.set(report.flag, row);
      }
      if (report.running) row.runningOn.push(answer.node);
      row.agree += report.agree;
      row.disagree += report.disagree;
      row.error += report.error;
      row.skipped += report.skipped;
      row.mismatches.push(...report.mismatches.map((m) => ({ ...m, node: answer.node })));
    }
  }
  const rows = [...byFlag.values()].filter(
    (row) => row.runningOn.length > 0 || row.agree + row.disagree + row.error + row.skipped > 0,
  );
  for (const row of rows) {
    const compared = row.agree + row.disagree + row.error;
    row.agreementRatio = compared === 0 ? null : row.agree / compared;
    row.mismatches = row.mismatches
      .sort((a, b) => b.at.localeCompare(a.at))
      .slice(0, SHADOW_MISMATCHES_SHOWN);
  }
  return { rows, unanswered };
}

/** An answer as JSON, cut short (a peers.list answer lists every session id). */
function short(value: unknown, max = 80): string {
  const text = JSON.stringify(value) ?? 'nothing';
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** One line per row, for `status`: counts, the ratio, where it runs, and its newest mismatch. */
export function shadowRowText(row: ShadowRowView): string {
  const ratio =
    row.agreementRatio === null ? 'no comparisons yet' : `agreement ${row.agreementRatio.toFixed(3)}`;
  const where = row.runningOn.length > 0 ? `on ${row.runningOn.join(', ')}` : 'stopped';
  const newest = row.mismatches[0];
  const mismatch = newest
    ? `; newest mismatch ${newest.at} on ${newest.node}: ${newest.subject} (${newest.outcome === 'error' ? `error: ${newest.error}` : `local ${short(newest.local)}, shared ${short(newest.shared)}`})`
    : '';
  return `${row.flag}: ${ratio} (${row.agree} agree, ${row.disagree} disagree, ${row.error} error, ${row.skipped} skipped) ${where}${mismatch}`;
}

/**
 * `workbench promote`'s exit codes, one per way a promotion ends (docs/promotion.md § For the release
 * manager), so a pipeline can tell "fix your input" from "blocked, nothing changed" from "paged a human".
 * 2 (bad input) is every UsageError's, set by cli/main.ts.
 */
import type { PromotionOutcome } from './promote.js';

export const PROMOTE_EXIT_CODES: Record<PromotionOutcome['status'], number> = {
  promoted: 0,
  planned: 0,
  rollback: 0,
  'rolled-back': 1,
  blocked: 3,
  'rollback-failed': 4,
  // An analysis was inconclusive: a human looks, then `promote --resume` or `--abort`.
  paused: 5,
};

/** Bad input (an option, the environment file, an expectations file): nothing was read after it. */
export const BAD_INPUT_EXIT_CODE = 2;

export function exitCodeOf(outcome: PromotionOutcome): number {
  return PROMOTE_EXIT_CODES[outcome.status];
}

/** The outcome's last line without --json. */
export function outcomeLine(environment: string, to: number, outcome: PromotionOutcome): string {
  const check = outcome.failedCheck ? ` (check ${outcome.failedCheck})` : '';
  switch (outcome.status) {
    case 'promoted':
      return `promoted ${environment} from phase ${outcome.from} to phase ${to}`;
    case 'blocked':
      return `blocked, nothing changed: ${outcome.reason}${check}`;
    case 'rolled-back':
      return `rolled back to the previous flags: ${outcome.reason}${check}`;
    case 'paused':
      return `PAUSED, a human decides (promote --env ${environment} --to ${to} --resume or --abort): ${outcome.reason}`;
    case 'rollback-failed':
      return `ROLLBACK FAILED, a human must look (the flags may be half-way): ${outcome.reason}${check}`;
    default:
      return `${outcome.status}: ${outcome.reason ?? ''}`;
  }
}

/**
 * `npm run bench [-- --quick]`: runs the benchmarks and prints their figures as JSON lines. `--quick`
 * (what CI runs) keeps each scenario to a few seconds, only to prove the scenarios still work.
 */
import { benchAuditAppends } from './audit-appends.js';

const quick = process.argv.includes('--quick');

const results = await benchAuditAppends({ runs: quick ? 1 : 5, entries: quick ? 500 : 10_000 });
for (const result of results) console.log(JSON.stringify({ scenario: 'audit-appends', ...result }));

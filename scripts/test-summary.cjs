// One line "tests: N passed, N failed, N skipped" over vitest JSON reports (scripts/test.sh,
// scripts/test-slow.sh and .ci/run), after one line per pass. A pass whose report is missing (it could
// not run) counts as a failure: exit 1. Usage: node scripts/test-summary.cjs "NAME=FILE" ...
const fs = require('node:fs');

const total = { passed: 0, failed: 0, skipped: 0, ran: 0 };
let missing = false;
for (const argument of process.argv.slice(2)) {
  const split = argument.indexOf('=');
  const [name, file] = [argument.slice(0, split), argument.slice(split + 1)];
  if (!fs.existsSync(file)) {
    console.error(`test: no report of the ${name} pass (${file})`);
    missing = true;
    continue;
  }
  const report = JSON.parse(fs.readFileSync(file, 'utf8'));
  const skipped = report.numPendingTests + report.numTodoTests;
  console.log(
    `test: ${name} pass ${report.numPassedTests} passed / ${report.numFailedTests} failed / ${skipped} skipped`,
  );
  total.passed += report.numPassedTests;
  total.failed += report.numFailedTests;
  total.skipped += skipped;
  total.ran += report.numTotalTests;
}
console.log(`tests: ${total.passed} passed, ${total.failed} failed, ${total.skipped} skipped`);
if (total.ran === 0) {
  console.error('no test ran');
  process.exit(1);
}
if (missing) process.exit(1);

// One line "tests: N passed, N failed, N skipped" over vitest JSON reports (scripts/test.sh,
// scripts/test-slow.sh and .ci/run), after one line per pass and one per failed test (its file, name and
// the first line of its error: the end of a long CI log is often all that is kept, so it says what failed
// and why). A pass whose report is missing (it could not run) counts as a failure: exit 1.
// Usage: node scripts/test-summary.cjs "NAME=FILE" ...
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
  for (const file of report.testResults ?? [])
    for (const test of file.assertionResults ?? [])
      if (test.status === 'failed') {
        const reason = String(test.failureMessages?.[0] ?? '')
          .split('\n')[0]
          .slice(0, 300);
        const where = file.name.slice(file.name.indexOf('/tests/') + 1);
        console.log(`test: FAILED ${where} › ${test.fullName ?? test.title}: ${reason}`);
      }
  if (report.numFailedTestSuites > 0 && report.numFailedTests === 0)
    for (const file of report.testResults ?? [])
      if (file.status === 'failed' && (file.assertionResults ?? []).length === 0)
        console.log(
          `test: FAILED ${file.name}: ${String(file.message ?? '')
            .split('\n')[0]
            .slice(0, 300)}`,
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

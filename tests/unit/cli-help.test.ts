/**
 * Every command's help lists every option its parser takes: main parses with the command's own spec
 * (cli/args.ts), and here each option is both accepted by that parse and named in the help. The options the
 * old usage left out (`up --env`, `--flags-phase`, `promote --actor`) are named explicitly.
 */
import { describe, expect, it } from 'vitest';
import { helpText, parse, UsageError } from '../../cli/args.js';
import { COMMANDS } from '../../cli/registry.js';
import { junitXml, xmlEscape } from '../../cli/report/junit.js';
import { type CheckResult, junitCase } from '../../cli/smoke/run.js';

describe('per-command help', () => {
  it.each(Object.keys(COMMANDS))('%s: every option the parser accepts is in its help', async (name) => {
    const command = await COMMANDS[name]!.load();
    const help = helpText(name, command);
    expect(help.startsWith(`usage: workbench ${name}`)).toBe(true);
    for (const [option, spec] of Object.entries(command.options)) {
      expect(help, `--${option}`).toMatch(new RegExp(`--${option}\\b`));
      if (spec.short) expect(help).toContain(`-${spec.short}, --${option}`);
      const args = spec.type === 'string' ? [`--${option}`, 'x'] : [`--${option}`];
      expect(parse(args, command.options).values[option]).toBe(spec.type === 'string' ? 'x' : true);
    }
    expect(() => parse(['--no-such-option'], command.options)).toThrow(UsageError);
  });

  it.each([
    ['up', '--env'],
    ['up', '--flags-phase'],
    ['promote', '--actor'],
    ['promote', '--json'],
    ['promote', '--junit'],
    ['promote', '--dry-run'],
    ['promote', '--allow-skip'],
    ['promote', '--force-unlock'],
    ['promote', '4 the rollback itself failed'],
    ['smoke', '--junit'],
    ['status', '--json'],
  ])('%s names %s', async (name, option) => {
    expect(helpText(name, await COMMANDS[name]!.load())).toContain(option);
  });
});

const result = (over: Partial<CheckResult>): CheckResult => ({
  name: 'cross-node-dm',
  flag: 'ha.delivery',
  row: 'durable DMs across nodes',
  outcome: 'pass',
  expected: 'pass',
  met: true,
  ms: 1234,
  detail: '',
  ...over,
});

describe('smoke outcomes as JUnit test cases', () => {
  it('an expected failure that fails passes; one that passes ("missed") fails saying so', () => {
    const gap = junitCase(
      result({ outcome: 'fail', expected: 'expected-fail', met: true, detail: 'each node its own' }),
      'smoke.phase1',
    );
    expect(gap).toMatchObject({ status: 'passed', ms: 1234 });
    expect(gap.detail).toContain('expected failure');
    const missed = junitCase(
      result({ outcome: 'pass', expected: 'expected-fail', met: false }),
      'smoke.phase1',
    );
    expect(missed).toMatchObject({ status: 'failed', type: 'missed-expected-failure' });
    expect(missed.message).toContain('the gap is gone, update the expectations');
  });

  it('n/a and skipped are skipped; a failed check, or n/a where a pass was expected, fails', () => {
    expect(
      junitCase(result({ outcome: 'n/a', expected: 'n/a', detail: 'needs two nodes' }), 'c').status,
    ).toBe('skipped');
    expect(junitCase(result({ outcome: 'skipped', detail: 'no control' }), 'c').status).toBe('skipped');
    expect(junitCase(result({ outcome: 'fail', met: false, detail: 'lost 1 DM' }), 'c')).toMatchObject({
      status: 'failed',
      type: 'check-failed',
      message: 'lost 1 DM',
    });
    expect(junitCase(result({ outcome: 'n/a', met: false }), 'c')).toMatchObject({
      status: 'failed',
      type: 'unexpected-n/a',
    });
  });

  it('escapes markup and drops characters XML cannot carry', () => {
    expect(xmlEscape(`<a href="x">&'\u0001`)).toBe('&lt;a href=&quot;x&quot;&gt;&amp;&apos;\uFFFD');
    const xml = junitXml([
      {
        name: 's',
        timestamp: '2026-01-01T00:00:00.000Z',
        cases: [{ name: 'c', classname: 'k', ms: 1500, status: 'failed', message: 'a < b', detail: ']]>' }],
      },
    ]);
    expect(xml).toContain('tests="1" failures="1" errors="0" skipped="0" time="1.500"');
    expect(xml).toContain('<failure message="a &lt; b" type="failure">]]&gt;</failure>');
  });
});

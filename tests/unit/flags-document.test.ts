import { describe, expect, it } from 'vitest';
import { parseFlagsDocument, renderFlagsDocument } from '../../flags/document.js';
import { defaultFlagValues, FLAGS, flagMode, phasePreset } from '../../flags/registry.js';

describe('flags registry and file format', () => {
  it('names one flag per state row with an HA mechanism, plus the active lease, each with phase and description', () => {
    expect(FLAGS.map((f) => f.key)).toEqual([
      'ha.presence',
      'ha.active-lease',
      'ha.delivery',
      'ha.connection-cap',
      'ha.rate-limits',
      'ha.streams',
      'ha.clock',
      'ha.mcp',
      'ha.schedules',
      'ha.watches',
      'ha.audit',
      'ha.regions',
    ]);
    for (const flag of FLAGS) {
      expect(flag.row.length).toBeGreaterThan(3);
      expect(flag.description.length).toBeGreaterThan(10);
      expect([1, 2, 3, 4]).toContain(flag.phase);
    }
    expect(Object.values(phasePreset(0)).every((v) => !v)).toBe(true);
    expect(
      Object.entries(phasePreset(1))
        .filter(([, v]) => v)
        .map(([k]) => k),
    ).toEqual(['ha.presence', 'ha.active-lease']);
    expect(
      Object.entries(phasePreset(3))
        .filter(([, v]) => !v)
        .map(([k]) => k),
    ).toEqual(['ha.regions']);
    expect(Object.values(phasePreset(4)).every(Boolean)).toBe(true);
  });

  it('round-trips a file and fills missing flags with defaults', () => {
    const values = { ...defaultFlagValues(), 'ha.audit': true };
    expect(parseFlagsDocument(renderFlagsDocument(values))).toEqual({ values, shadow: [], problems: [] });
    expect(parseFlagsDocument('{"flags": {"ha.audit": true}}').values).toEqual(values);
  });

  it.each([
    ['{"flags": {"ha.audit": tru', 'not valid JSON'],
    ['[]', 'expected an object'],
    ['{"ha.audit": true}', 'expected an object'],
    ['{"flags": {"ha.audti": true}}', 'unknown flag "ha.audti"'],
    ['{"flags": {"ha.audit": "yes"}}', 'flag "ha.audit" must be true, false or "shadow"'],
    ['{"flags": {"ha.audit": "shadw"}}', 'flag "ha.audit" must be true, false or "shadow", got "shadw"'],
    ['{"flags": {"ha.audit": "shadow", "ha.mcp": 1}}', 'flag "ha.mcp" must be true, false or "shadow"'],
  ])('refuses %s as a whole, saying why', (text, problem) => {
    const parsed = parseFlagsDocument(text);
    expect(parsed.values).toBeUndefined();
    expect(parsed.problems.join('\n')).toContain(problem);
  });

  it('reads "shadow" as the third value: served locally (false), listed in shadow, and writes it back', () => {
    const parsed = parseFlagsDocument(
      '{"flags": {"ha.presence": "shadow", "ha.audit": true, "ha.mcp": "off"}}',
    );
    expect(parsed.problems).toEqual([]);
    expect(parsed.shadow).toEqual(['ha.presence']);
    expect(parsed.values).toMatchObject({ 'ha.presence': false, 'ha.audit': true, 'ha.mcp': false });
    expect(flagMode(parsed.values!, parsed.shadow, 'ha.presence')).toBe('shadow');
    expect(flagMode(parsed.values!, parsed.shadow, 'ha.audit')).toBe('on');
    expect(flagMode(parsed.values!, parsed.shadow, 'ha.mcp')).toBe('off');
    expect(parseFlagsDocument(renderFlagsDocument(parsed.values!, parsed.shadow))).toEqual(parsed);
    expect(JSON.parse(renderFlagsDocument(parsed.values!, parsed.shadow)).flags['ha.presence']).toBe(
      'shadow',
    );
  });
});

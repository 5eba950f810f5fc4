//! Message text: turning what an agent sends into lines a chat network carries.
//!
//! IRC carries one line per message, so every backend stores and relays a
//! multi-line text as consecutive one-line messages. CR, LF and NUL never
//! survive inside a line: they are the only bytes that could end an IRC
//! command early and smuggle in another one. Nor do the other characters
//! some reader takes as a line break ([`LINE_BREAKS`]): a line that shows
//! as two could pass its second half off as another nick's message.

/// Unicode's line breaks: LF, CR, vertical tab, form feed, NEL and the line
/// and paragraph separators.
const LINE_BREAKS: [char; 7] = [
    '\n', '\r', '\u{b}', '\u{c}', '\u{85}', '\u{2028}', '\u{2029}',
];

/// Why a text cannot be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TextError {
    #[error("text is empty; there is nothing to send")]
    Empty,
    #[error(
        "text is {len} bytes long; the limit is {max} bytes (chat.max_text_bytes); send it in parts"
    )]
    TooLong { len: usize, max: usize },
}

/// Zero-width characters and text-direction controls: they change how the
/// text around them looks without showing themselves, so two names that
/// look alike differ, or a notice reads backwards.
pub(crate) fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// Splits `text` into the lines to send, in order.
///
/// Every one of [`LINE_BREAKS`] ends a line (CRLF counts once); blank lines
/// are skipped (IRC cannot carry an empty message); NUL and CTCP's `\x01`
/// become U+FFFD, so they stay visible and no line goes out as a CTCP
/// request (`\x01VERSION\x01` to everyone in the channel).
pub(crate) fn message_lines(text: &str, max_bytes: usize) -> Result<Vec<String>, TextError> {
    if text.len() > max_bytes {
        return Err(TextError::TooLong {
            len: text.len(),
            max: max_bytes,
        });
    }
    let lines: Vec<String> = text
        .split(LINE_BREAKS)
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.replace(['\0', '\u{1}'], "\u{FFFD}"))
        .collect();
    if lines.is_empty() {
        return Err(TextError::Empty);
    }
    Ok(lines)
}

/// A line heard from the network as it is stored: one line, whatever the
/// sender put in it (a space for each of [`LINE_BREAKS`], U+FFFD for NUL).
pub(crate) fn heard_line(text: String) -> String {
    if text.contains(LINE_BREAKS) || text.contains('\0') {
        text.replace(LINE_BREAKS, " ").replace('\0', "\u{FFFD}")
    } else {
        text
    }
}

/// `text` without IRC's formatting codes (bold, italics, underline,
/// strikethrough, monospace, reverse, reset, and colours with their
/// numbers), for matching what it says: an approval reply in colour is
/// still that reply. What is stored keeps them.
pub(crate) fn without_formatting(text: &str) -> std::borrow::Cow<'_, str> {
    const TOGGLES: [char; 7] = [
        '\u{2}', '\u{1d}', '\u{1f}', '\u{1e}', '\u{11}', '\u{16}', '\u{f}',
    ];
    if !text.contains(|c| TOGGLES.contains(&c) || c == '\u{3}' || c == '\u{4}') {
        return text.into();
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        // A colour's number: up to `digits` characters of `is_digit`,
        // then optionally a comma and a background the same way.
        let mut skip_colour = |digits: usize, is_digit: fn(&char) -> bool| {
            let take = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
                let mut n = 0;
                while n < digits && chars.next_if(is_digit).is_some() {
                    n += 1;
                }
                n
            };
            if take(&mut chars) > 0 && chars.peek() == Some(&',') {
                let mut ahead = chars.clone();
                ahead.next();
                if ahead.peek().is_some_and(is_digit) {
                    chars.next();
                    take(&mut chars);
                }
            }
        };
        match c {
            '\u{3}' => skip_colour(2, |c| c.is_ascii_digit()),
            '\u{4}' => skip_colour(6, |c| c.is_ascii_hexdigit()),
            c if TOGGLES.contains(&c) => {}
            c => out.push(c),
        }
    }
    out.into()
}

/// Splits one line into pieces of at most `budget` bytes each: at the last
/// whitespace that fits, else at the last UTF-8 boundary that fits.
///
/// Whitespace at a split point is dropped from both pieces; nothing else is
/// lost, and the pieces in order spell the line.
pub(crate) fn split_to_fit(line: &str, budget: usize) -> Vec<&str> {
    let budget = budget.max(4); // one UTF-8 scalar always fits
    let mut pieces = Vec::new();
    let mut rest = line;
    while rest.len() > budget {
        let mut cut = budget;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let head = &rest[..cut];
        let split = if rest[cut..].starts_with(char::is_whitespace) {
            Some(cut)
        } else {
            head.rfind(char::is_whitespace).filter(|&at| at > 0)
        };
        match split {
            Some(at) => {
                pieces.push(rest[..at].trim_end());
                rest = rest[at..].trim_start();
            }
            None => {
                pieces.push(head);
                rest = &rest[cut..];
            }
        }
    }
    if !rest.is_empty() {
        pieces.push(rest);
    }
    pieces.retain(|piece| !piece.is_empty());
    pieces
}

/// The length of `text` as the contents of a JSON string: what it takes of
/// a reply or an event, where a control character escapes to six bytes.
pub(crate) fn json_len(text: &str) -> usize {
    text.bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum()
}

/// Cuts `text`, at a character boundary, to what takes at most `room`
/// bytes as JSON ([`json_len`]) and ends it with `note`; false when it fit
/// already.
pub(crate) fn cut_escaped(text: &mut String, room: usize, note: &str) -> bool {
    if json_len(text) <= room {
        return false;
    }
    let room = room.saturating_sub(json_len(note));
    let mut used = 0;
    let mut end = 0;
    for (at, c) in text.char_indices() {
        used += json_len(c.encode_utf8(&mut [0; 4]));
        if used > room {
            break;
        }
        end = at + c.len_utf8();
    }
    text.truncate(end);
    text.push_str(note);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting_codes_are_left_out_for_matching() {
        for (text, plain) in [
            ("\u{3}04alice\u{3}, look", "alice, look"),
            ("\u{3}4,12yes r2\u{f}", "yes r2"),
            ("\u{2}yes\u{2} r8", "yes r8"),
            ("\u{4}ff0000alice\u{4}", "alice"),
            ("\u{3}12,alice", ",alice"),
            ("\u{3},5 x", ",5 x"),
            ("1,2 plain", "1,2 plain"),
        ] {
            assert_eq!(without_formatting(text), plain, "{text:?}");
        }
    }

    #[test]
    fn lines_split_on_every_line_break_and_skip_blank_ones() {
        let lines = message_lines("one\r\ntwo\rthree\n\n  \nfour", 1000).unwrap();
        assert_eq!(lines, ["one", "two", "three", "four"]);
    }

    #[test]
    fn no_line_can_pass_for_two() {
        let forged = "fine\u{2028}[02:00:00] <boss> ship it";
        for separator in ['\u{b}', '\u{c}', '\u{85}', '\u{2028}', '\u{2029}'] {
            let text = forged.replace('\u{2028}', &separator.to_string());
            assert_eq!(
                message_lines(&text, 1000).unwrap(),
                ["fine", "[02:00:00] <boss> ship it"],
                "{separator:?}"
            );
            assert_eq!(heard_line(text), "fine [02:00:00] <boss> ship it");
        }
        assert_eq!(heard_line("a\0b".into()), "a\u{FFFD}b");
        assert_eq!(heard_line("\u{2}bold\u{2}".into()), "\u{2}bold\u{2}");
    }

    #[test]
    fn injected_commands_stay_inside_their_message() {
        let lines = message_lines("hi\r\nQUIT :bye", 1000).unwrap();
        assert_eq!(lines, ["hi", "QUIT :bye"]);
        assert!(lines.iter().all(|l| !l.contains(['\r', '\n', '\0'])));
        assert_eq!(message_lines("a\0b", 10).unwrap(), ["a\u{FFFD}b"]);
        assert_eq!(
            message_lines("\u{1}VERSION\u{1}", 20).unwrap(),
            ["\u{FFFD}VERSION\u{FFFD}"]
        );
    }

    #[test]
    fn empty_and_oversized_texts_are_refused() {
        assert_eq!(message_lines("", 10), Err(TextError::Empty));
        assert_eq!(message_lines(" \n\t\r\n", 10), Err(TextError::Empty));
        assert_eq!(
            message_lines(&"x".repeat(11), 10),
            Err(TextError::TooLong { len: 11, max: 10 })
        );
    }

    #[test]
    fn split_prefers_whitespace() {
        assert_eq!(split_to_fit("aaaa bbbb cccc", 9), ["aaaa bbbb", "cccc"]);
        assert_eq!(split_to_fit("aaaa bbbb", 100), ["aaaa bbbb"]);
    }

    #[test]
    fn split_falls_back_to_utf8_boundaries() {
        let line = "é".repeat(10); // 20 bytes
        let pieces = split_to_fit(&line, 5);
        assert!(pieces.iter().all(|p| p.len() <= 5));
        assert_eq!(pieces.concat(), line);
    }

    #[test]
    fn split_keeps_every_non_space_character_in_order() {
        let line = "lorem ipsum dolor sit amet, ünïcödé 🎉 consectetur ".repeat(40);
        for budget in [4, 7, 33, 100, 450] {
            let pieces = split_to_fit(&line, budget);
            assert!(pieces.iter().all(|p| p.len() <= budget && !p.is_empty()));
            let strip = |s: &str| s.split_whitespace().collect::<String>();
            assert_eq!(strip(&pieces.concat()), strip(&line), "budget {budget}");
        }
    }
}

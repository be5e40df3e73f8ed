"""The 17 ContractNLI-style hypotheses and the clause sentences that decide them.

Hypotheses follow the wording style of ContractNLI (Koreeda and Manning, 2021), which
uses exactly 17 hypotheses over non-disclosure agreements. For every hypothesis there
are sentences that *entail* it and sentences that *contradict* it; a contract whose label
for a hypothesis is ``not_mentioned`` contains neither. Each hypothesis belongs to one
contract section (:data:`SECTION_OF`), where its sentence is placed.

Sentences use ``{slot}`` fields filled from :data:`CLAUSE_SLOTS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

LABELS: Final = ("entailment", "contradiction", "not_mentioned")


@dataclass(frozen=True)
class Hypothesis:
    """One hypothesis and the clause sentences that decide it.

    Attributes:
        hypothesis_id: stable id in ContractNLI's numbering (``"nda-1"`` ...).
        title: short name of the obligation.
        text: the hypothesis statement.
        entail: sentences that entail the hypothesis.
        contradict: sentences that contradict it.
    """

    hypothesis_id: str
    title: str
    text: str
    entail: tuple[str, ...]
    contradict: tuple[str, ...]


HYPOTHESES: Final[tuple[Hypothesis, ...]] = (
    Hypothesis(
        "nda-1",
        "Explicit identification",
        "All Confidential Information shall be expressly identified by the Disclosing Party.",
        entail=(
            "Information shall constitute Confidential Information only if it is clearly "
            'marked "Confidential" or otherwise expressly designated as confidential by '
            "Disclosing Party.",
            "Disclosing Party shall identify in writing all information that it considers "
            "confidential, and unidentified information shall not be protected under this "
            "Agreement.",
        ),
        contradict=(
            "Information shall be Confidential Information whether or not it is marked, "
            "labelled or otherwise identified as confidential.",
            "The absence of a confidentiality legend shall not affect the confidential "
            "status of any information disclosed under this Agreement.",
        ),
    ),
    Hypothesis(
        "nda-2",
        "None-inclusion of non-technical information",
        "Confidential Information shall only include technical information.",
        entail=(
            "Confidential Information is limited to technical information, namely "
            "specifications, designs, drawings, source code, formulae and test data, and "
            "excludes business, commercial and financial information.",
            "For the avoidance of doubt, only technical data relating to the {product} shall "
            "be treated as Confidential Information.",
        ),
        contradict=(
            "Confidential Information includes business, financial, commercial and marketing "
            "information, customer lists and pricing, as well as technical data.",
            "Confidential Information covers all business plans, forecasts, personnel "
            "information and financial statements in addition to any technical information.",
        ),
    ),
    Hypothesis(
        "nda-3",
        "Inclusion of verbally conveyed information",
        "Confidential Information may include verbally conveyed information.",
        entail=(
            "Confidential Information includes information disclosed in writing, in "
            "electronic form, or orally during meetings or telephone calls.",
            "Information conveyed verbally, including in presentations and site visits, "
            "shall be treated as Confidential Information.",
        ),
        contradict=(
            "Information disclosed orally or visually shall not constitute Confidential "
            "Information under this Agreement.",
            "Only information disclosed in written or electronic form may qualify as "
            "Confidential Information; oral disclosures are excluded.",
        ),
    ),
    Hypothesis(
        "nda-4",
        "Limited use",
        "Receiving Party shall not use any Confidential Information for any purpose other "
        "than the purposes stated in Agreement.",
        entail=(
            "Receiving Party shall use the Confidential Information solely for the Purpose "
            "and for no other purpose whatsoever.",
            "Receiving Party shall not use any Confidential Information except as strictly "
            "necessary to carry out the Purpose.",
        ),
        contradict=(
            "Receiving Party may use the Confidential Information for any lawful business "
            "purpose, including purposes unrelated to the Purpose.",
            "Nothing in this Agreement restricts the purposes for which Receiving Party may "
            "use the Confidential Information.",
        ),
    ),
    Hypothesis(
        "nda-5",
        "Sharing with employees",
        "Receiving Party may share some Confidential Information with some of Receiving "
        "Party's employees.",
        entail=(
            "Receiving Party may disclose Confidential Information to those of its employees "
            "who need to know it for the Purpose and who are bound by written "
            "confidentiality obligations.",
            "Access to Confidential Information may be given to employees of Receiving Party "
            "on a need-to-know basis.",
        ),
        contradict=(
            "Confidential Information shall be accessed solely by the individual signatory "
            "of Receiving Party and shall not be shared with any employee of Receiving "
            "Party.",
            "Receiving Party shall not disclose any Confidential Information to its "
            "employees or officers.",
        ),
    ),
    Hypothesis(
        "nda-7",
        "Sharing with third-parties",
        "Receiving Party may share some Confidential Information with some third-parties "
        "(including consultants, agents and professional advisors).",
        entail=(
            "Receiving Party may disclose Confidential Information to its legal counsel, "
            "accountants, consultants and agents who are bound by duties of confidentiality "
            "no less protective than this Agreement.",
            "Confidential Information may be shared with Receiving Party's professional "
            "advisors to the extent needed for the Purpose.",
        ),
        contradict=(
            "Receiving Party shall not disclose Confidential Information to any third party, "
            "including its consultants, agents and professional advisors.",
            "No Confidential Information may be disclosed to any person outside Receiving "
            "Party's own organization under any circumstances.",
        ),
    ),
    Hypothesis(
        "nda-8",
        "Notice on compelled disclosure",
        "Receiving Party shall notify Disclosing Party in case Receiving Party is required "
        "by law, regulation or judicial process to disclose any Confidential Information.",
        entail=(
            "If Receiving Party is required by law, regulation or court order to disclose "
            "any Confidential Information, it shall give Disclosing Party prompt written "
            "notice so that Disclosing Party may seek a protective order.",
            "Before making any disclosure compelled by a subpoena or governmental authority, "
            "Receiving Party shall notify Disclosing Party within {days} days of receiving "
            "the request.",
        ),
        contradict=(
            "Receiving Party may disclose Confidential Information when required by law or "
            "judicial process without any obligation to notify Disclosing Party.",
            "Receiving Party shall have no duty to inform Disclosing Party of any legally "
            "compelled disclosure of Confidential Information.",
        ),
    ),
    Hypothesis(
        "nda-10",
        "Confidentiality of Agreement",
        "Receiving Party shall not disclose the fact that Agreement was agreed or negotiated.",
        entail=(
            "Receiving Party shall not disclose to any person the existence or terms of this "
            "Agreement or the fact that discussions between the parties are taking place.",
            "Receiving Party shall keep confidential the fact that this Agreement has been "
            "entered into and that negotiations between the parties are ongoing.",
        ),
        contradict=(
            "Either party may publicly disclose the existence of this Agreement and the fact "
            "that the parties are in discussions.",
            "Receiving Party is free to announce that it has entered into this Agreement "
            "with Disclosing Party.",
        ),
    ),
    Hypothesis(
        "nda-11",
        "No reverse engineering",
        "Receiving Party shall not reverse engineer any objects which embody Disclosing "
        "Party's Confidential Information.",
        entail=(
            "Receiving Party shall not reverse engineer, decompile or disassemble any "
            "prototypes, software, samples or other tangible objects which embody "
            "Confidential Information.",
            "Receiving Party shall not analyse the composition or structure of any samples "
            "provided by Disclosing Party.",
        ),
        contradict=(
            "Nothing in this Agreement prohibits Receiving Party from analysing, testing or "
            "reverse engineering any samples or prototypes provided to it.",
            "Receiving Party may disassemble and reverse engineer the {product} samples "
            "delivered under this Agreement.",
        ),
    ),
    Hypothesis(
        "nda-12",
        "Permissible development of similar information",
        "Receiving Party may independently develop information similar to Confidential "
        "Information.",
        entail=(
            "The obligations of this Agreement do not apply to information that is "
            "independently developed by Receiving Party without use of the Confidential "
            "Information.",
            "Nothing in this Agreement prevents Receiving Party from independently "
            "developing products or information similar to those disclosed, provided no "
            "Confidential Information is used.",
        ),
        contradict=(
            "Receiving Party shall not develop, or have developed, any product or "
            "information similar to the Confidential Information during the term of this "
            "Agreement.",
            "Receiving Party shall refrain from any independent development in the field of "
            "the {product} while this Agreement is in effect.",
        ),
    ),
    Hypothesis(
        "nda-13",
        "Permissible acquirement of similar information",
        "Receiving Party may acquire information similar to Confidential Information from "
        "a third party.",
        entail=(
            "The obligations of this Agreement do not apply to information that Receiving "
            "Party rightfully receives from a third party without a duty of confidentiality.",
            "Receiving Party may obtain information similar to the Confidential Information "
            "from third parties who are not bound by any confidentiality obligation.",
        ),
        contradict=(
            "Receiving Party shall not acquire information similar to the Confidential "
            "Information from any third party during the term of this Agreement.",
            "Information received from third parties shall remain subject to this Agreement "
            "if it is similar to the Confidential Information.",
        ),
    ),
    Hypothesis(
        "nda-15",
        "No licensing",
        "Agreement shall not grant Receiving Party any right to Confidential Information.",
        entail=(
            "No license or other right under any patent, copyright, trade secret or other "
            "intellectual property right is granted to Receiving Party by this Agreement.",
            "Nothing in this Agreement shall be construed as granting Receiving Party any "
            "right or license to the Confidential Information.",
        ),
        contradict=(
            "Disclosing Party hereby grants Receiving Party a non-exclusive, royalty-free "
            "license to use the Confidential Information for the Purpose.",
            "Receiving Party is granted a limited license under Disclosing Party's patents "
            "covering the Confidential Information.",
        ),
    ),
    Hypothesis(
        "nda-16",
        "Return of confidential information",
        "Receiving Party shall destroy or return some Confidential Information upon the "
        "termination of Agreement.",
        entail=(
            "Upon termination of this Agreement, Receiving Party shall promptly return or "
            "destroy all documents and materials containing Confidential Information.",
            "Within {days} days after termination, Receiving Party shall return to "
            "Disclosing Party, or destroy, all Confidential Information in its possession.",
        ),
        contradict=(
            "Receiving Party shall have no obligation to return or destroy any Confidential "
            "Information upon termination of this Agreement.",
            "Materials containing Confidential Information may be kept by Receiving Party "
            "after termination, and no return or destruction shall be required.",
        ),
    ),
    Hypothesis(
        "nda-17",
        "Permissible copy",
        "Receiving Party may create a copy of some Confidential Information in some circumstances.",
        entail=(
            "Receiving Party may make copies of Confidential Information only to the extent "
            "reasonably necessary for the Purpose.",
            "Receiving Party may reproduce Confidential Information for internal use, "
            "provided that all copies bear the original confidentiality notices.",
        ),
        contradict=(
            "Receiving Party shall not copy, reproduce or duplicate any Confidential "
            "Information in any form.",
            "No copies of any Confidential Information may be made for any reason.",
        ),
    ),
    Hypothesis(
        "nda-18",
        "No solicitation",
        "Receiving Party shall not solicit some of Disclosing Party's representatives.",
        entail=(
            "For {months} months after the Effective Date, Receiving Party shall not solicit "
            "for employment any employee of Disclosing Party with whom it had contact "
            "in connection with the Purpose.",
            "Receiving Party shall not, directly or indirectly, induce any officer or "
            "employee of Disclosing Party to leave that employment.",
        ),
        contradict=(
            "Nothing in this Agreement restricts Receiving Party from soliciting or hiring "
            "any employee of Disclosing Party.",
            "Receiving Party remains free to approach and recruit Disclosing Party's personnel.",
        ),
    ),
    Hypothesis(
        "nda-19",
        "Survival of obligations",
        "Some obligations of Agreement may survive termination of Agreement.",
        entail=(
            "The obligations of confidentiality under this Agreement shall survive its "
            "termination for a period of {years} years.",
            "The provisions on confidentiality and non-use shall survive any expiration or "
            "termination of this Agreement.",
        ),
        contradict=(
            "All obligations of the parties under this Agreement shall cease upon its "
            "expiration or termination.",
            "Upon termination, neither party shall have any continuing obligation under "
            "this Agreement.",
        ),
    ),
    Hypothesis(
        "nda-20",
        "Permissible post-agreement possession",
        "Receiving Party may retain some Confidential Information even after the return or "
        "destruction of Confidential Information.",
        entail=(
            "Receiving Party may retain one archival copy of Confidential Information in its "
            "legal files solely to evidence its compliance with this Agreement.",
            "Copies held in automatic electronic backup systems may be retained, subject to "
            "continued confidentiality.",
        ),
        contradict=(
            "Receiving Party shall not retain any copy, extract or summary of Confidential "
            "Information after its return or destruction.",
            "Receiving Party shall certify in writing that no Confidential Information, "
            "including backup copies, remains in its possession after destruction.",
        ),
    ),
)

SECTION_OF: Final[dict[str, str]] = {
    "nda-1": "definitions",
    "nda-2": "definitions",
    "nda-3": "definitions",
    "nda-4": "obligations",
    "nda-5": "obligations",
    "nda-7": "obligations",
    "nda-10": "obligations",
    "nda-11": "obligations",
    "nda-17": "obligations",
    "nda-12": "exceptions",
    "nda-13": "exceptions",
    "nda-8": "compelled",
    "nda-15": "ownership",
    "nda-16": "return",
    "nda-20": "return",
    "nda-18": "solicitation",
    "nda-19": "term",
}

CLAUSE_SLOTS: Final[dict[str, tuple[str, ...]]] = {
    "years": ("two", "three", "five", "seven"),
    "months": ("six", "twelve", "eighteen", "twenty-four"),
    "days": ("five", "ten", "fifteen", "thirty"),
}
